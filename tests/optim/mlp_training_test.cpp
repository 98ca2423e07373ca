// End to end: a 2-layer MLP trained with AdamW (plus warm-up/decay schedule and clipping)
// learns an XOR-like problem that no untrained model, and no linear model, can fit.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/init.h"
#include "framework/module.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/optim/adamw.h"
#include "framework/optim/clip_grad.h"
#include "framework/optim/lr_schedule.h"
#include "framework/rng.h"

namespace tarn {
namespace {

constexpr int kPoints = 256;
constexpr int kHidden = 32;
constexpr int kClasses = 2;
constexpr int kSteps = 150;
// ln 2 = 0.693 is chance level for two balanced classes; a linear classifier cannot beat it on
// XOR (each half-plane holds both classes equally), so 0.15 can only be reached by learning
// the non-linear boundary.
constexpr float kLossThreshold = 0.15f;

// Four Gaussian clusters at (±1, ±1), sd 0.25; the class is XOR of the coordinates' signs.
struct Dataset {
  Tensor x;                     // (kPoints, 2)
  std::vector<int32_t> labels;  // (kPoints)
};
Dataset make_xor(uint64_t seed) {
  Philox rng(seed);
  Dataset d{Tensor::empty({kPoints, 2}), {}};
  float* x = d.x.f32();
  for (int i = 0; i < kPoints; ++i) {
    const int sx = (i & 1) ? 1 : -1, sy = (i & 2) ? 1 : -1;  // balanced: 64 points per cluster
    x[2 * i] = sx + 0.25f * rng.normal();
    x[2 * i + 1] = sy + 0.25f * rng.normal();
    d.labels.push_back(sx * sy > 0 ? 0 : 1);
  }
  return d;
}

struct Mlp : Module {
  Tensor w1 = Tensor::empty({kHidden, 2}), b1 = Tensor::empty({kHidden});
  Tensor w2 = Tensor::empty({kClasses, kHidden}), b2 = Tensor::empty({kClasses});
  explicit Mlp(uint64_t seed) {
    Philox rng(seed);
    init::linear_default_(w1, b1, rng);
    init::linear_default_(w2, b2, rng);
    register_parameter("fc1.weight", w1);
    register_parameter("fc1.bias", b1);
    register_parameter("fc2.weight", w2);
    register_parameter("fc2.bias", b2);
  }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

// The control: a linear classifier, trained the same way, cannot fit XOR.
struct LinearModel : Module {
  Tensor w = Tensor::empty({kClasses, 2}), b = Tensor::empty({kClasses});
  explicit LinearModel(uint64_t seed) {
    Philox rng(seed);
    init::linear_default_(w, b, rng);
    register_parameter("fc.weight", w);
    register_parameter("fc.bias", b);
  }
  Tensor forward(const Tensor& x) const { return linear(x, w, b); }
};

template <typename Model>
float loss_of(const Model& m, const Dataset& d) {
  NoGradGuard no_grad;
  return cross_entropy(m.forward(d.x), d.labels).item();
}

// kSteps of full-batch AdamW, linear warm-up and decay, gradients clipped to norm 1.
template <typename Model>
void train_with_adamw(Model& model, const Dataset& train) {
  AdamWOptions options;
  options.weight_decay = 0.01f;
  AdamW opt(model.named_parameters(), options);
  LrSchedule schedule;
  schedule.kind = LrScheduleKind::linear;
  schedule.lr = 0.05f;
  schedule.warmup_steps = 10;
  schedule.total_steps = kSteps;
  schedule.validate();
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(model.forward(train.x), train.labels);
    loss.backward();
    const float norm = clip_grad_norm(model.named_parameters(), 1.0f);
    ASSERT_TRUE(std::isfinite(norm)) << "step " << step;
    ASSERT_GT(norm, 0.0f) << "step " << step << ": no gradient reached the parameters";
    opt.set_lr(schedule.lr_at(opt.step_count()));
    opt.step();
  }
  EXPECT_EQ(opt.step_count(), kSteps);
}

TEST(MlpTraining, AdamWDrivesXorLossBelowWhatAnUntrainedModelReaches) {
  const Dataset train = make_xor(1), held_out = make_xor(2);
  Mlp model(3);
  const float untrained = loss_of(model, train);
  EXPECT_GT(untrained, kLossThreshold);

  train_with_adamw(model, train);
  const float trained = loss_of(model, train), generalised = loss_of(model, held_out);
  EXPECT_LT(trained, kLossThreshold) << "untrained " << untrained;
  EXPECT_LT(generalised, kLossThreshold) << "on fresh points from the same clusters";
}

TEST(MlpTraining, ThresholdIsOutOfReachOfATrainedLinearModel) {
  const Dataset train = make_xor(1);
  LinearModel model(3);
  train_with_adamw(model, train);
  EXPECT_GT(loss_of(model, train), 0.5f);  // stuck near ln 2
}

}  // namespace
}  // namespace tarn
