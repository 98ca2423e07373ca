// Clipping folded into AdamW (clip_factor + AdamW::step(grad_scale)) against the two passes it
// replaces (clip_grad_norm scaling the gradients, then AdamW::step): the same parameters and
// moments, bit for bit, clipped or not, on the CPU kernels' parallel path (tensors above
// kParallelGrain) and the serial one. Then the whole update over a parameter arena in one call
// (AdamW::fused_step, as TrainStep runs it) against the same two passes, and its skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/optim/adamw.h"
#include "framework/optim/clip_grad.h"
#include "framework/parameter_arena.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

using testing::random_tensor;

struct Params {
  std::vector<Tensor> tensors;
  Params() {
    uint64_t seed = 1;
    for (int64_t n : {int64_t{70000}, int64_t{37}, int64_t{4096}, int64_t{5}})
      tensors.push_back(random_tensor(Shape{n}, seed++).set_requires_grad(true));
  }
  std::vector<std::pair<std::string, Tensor*>> named() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back("p" + std::to_string(i) + ".weight", &tensors[i]);
    return out;
  }
  void set_grads(uint64_t seed, float magnitude) {
    for (Tensor& t : tensors) {
      std::vector<float> v = random_tensor(t.shape(), seed++).to_vector();
      for (float& x : v) x *= magnitude;
      t.set_grad(Tensor::from_vector(v, t.shape()));
    }
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(FusedClipAdamW, OnePassGivesTheBitsOfClippingThenStepping) {
  for (const float max_norm : {0.5f, 1e6f}) {  // clipping, and a norm within the bound
    Params two_pass, one_pass;
    AdamW a(two_pass.named(), {}), b(one_pass.named(), {});
    for (int step = 0; step < 4; ++step) {
      two_pass.set_grads(100 + static_cast<uint64_t>(step) * 10, 3.0f);
      one_pass.set_grads(100 + static_cast<uint64_t>(step) * 10, 3.0f);
      std::vector<Tensor*> pa, pb;
      for (auto& t : two_pass.tensors) pa.push_back(&t);
      for (auto& t : one_pass.tensors) pb.push_back(&t);
      const float norm_a = clip_grad_norm(pa, max_norm);
      a.step();
      const double norm_b = global_grad_norm(pb);
      EXPECT_EQ(norm_a, static_cast<float>(norm_b));
      b.step(clip_factor(norm_b, max_norm));
      for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bits(*pa[i], *pb[i])) << "parameter " << i;
      const AdamWState sa = a.state_view(), sb = b.state_view();
      for (const auto& [name, s] : sa.params) {
        EXPECT_TRUE(same_bits(s.exp_avg, sb.params.at(name).exp_avg)) << name;
        EXPECT_TRUE(same_bits(s.exp_avg_sq, sb.params.at(name).exp_avg_sq)) << name;
      }
    }
  }
}

// Parameters with a decaying weight, a bias and a layer norm (no decay), one spanning several
// sum-of-squares blocks; `spare` has a gradient only on some steps.
struct NamedParams {
  std::vector<Tensor> tensors;
  std::vector<std::string> names = {"fc.weight", "fc.bias", "layer_norm.weight", "out.weight", "spare.weight"};
  NamedParams() {
    uint64_t seed = 1;
    for (int64_t n : {int64_t{3 * kernels::cpu::kSumSquaresBlock + 70}, int64_t{37}, int64_t{64}, int64_t{4096},
                      int64_t{5}})
      tensors.push_back(random_tensor(Shape{n}, seed++).set_requires_grad(true));
  }
  std::vector<std::pair<std::string, Tensor*>> named() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (size_t i = 0; i < tensors.size(); ++i) out.emplace_back(names[i], &tensors[i]);
    return out;
  }
  std::vector<Tensor*> pointers() {
    std::vector<Tensor*> out;
    for (Tensor& t : tensors) out.push_back(&t);
    return out;
  }
  // Gradients of magnitude ~`magnitude`; the last parameter gets one on even steps only.
  void set_grads(int step, float magnitude) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      Tensor& t = tensors[i];
      if (i + 1 == tensors.size() && step % 2 == 1) {
        t.zero_grad();
        continue;
      }
      std::vector<float> v = random_tensor(t.shape(), 1000 + static_cast<uint64_t>(step) * 10 + i).to_vector();
      for (float& x : v) x *= magnitude;
      t.set_grad(Tensor::from_vector(v, t.shape()));
    }
  }
};

void expect_same_state(const AdamW& a, const AdamW& b) {
  const AdamWState sa = a.state(), sb = b.state();
  EXPECT_EQ(sa.step_count, sb.step_count);
  for (const auto& [name, s] : sa.params) {
    EXPECT_TRUE(same_bits(s.exp_avg, sb.params.at(name).exp_avg)) << name;
    EXPECT_TRUE(same_bits(s.exp_avg_sq, sb.params.at(name).exp_avg_sq)) << name;
    EXPECT_EQ(s.step, sb.params.at(name).step) << name;
  }
}

TEST(FusedClipAdamW, TheArenaUpdateInOneCallGivesTheBitsOfClippingThenStepping) {
  for (const float max_norm : {0.5f, 1e6f, 0.0f}) {  // clipping, a norm within the bound, no clipping
    SCOPED_TRACE(max_norm);
    NamedParams per_tensor, fused;
    ParameterArena arena(fused.pointers(), Device::cpu());
    AdamWOptions o;
    o.weight_decay = 0.1f;
    AdamW a(per_tensor.named(), o), b(fused.named(), o);
    b.use_arena(arena);
    for (int step = 0; step < 4; ++step) {
      per_tensor.set_grads(step, 3.0f);
      fused.set_grads(step, 3.0f);  // set_grad: fused_step copies them into the arena
      const float norm = max_norm > 0 ? clip_grad_norm(per_tensor.pointers(), max_norm)
                                      : static_cast<float>(global_grad_norm(per_tensor.pointers()));
      a.step();
      kernels::cpu::AdamWOutcome outcome;
      b.fused_step(max_norm, nullptr, &outcome);
      EXPECT_EQ(outcome.applied, 1);
      EXPECT_EQ(static_cast<float>(outcome.norm), norm);
      EXPECT_EQ(outcome.norm, global_grad_norm(fused.pointers())) << "the norm is global_grad_norm's";
      EXPECT_EQ(outcome.scale, clip_factor(outcome.norm, max_norm)) << "the factor is clip_factor's";
      for (size_t i = 0; i < per_tensor.tensors.size(); ++i)
        EXPECT_TRUE(same_bits(per_tensor.tensors[i], fused.tensors[i])) << fused.names[i] << ", step " << step;
      expect_same_state(a, b);
      for (Tensor& t : per_tensor.tensors) t.zero_grad();
      for (Tensor& t : fused.tensors) t.zero_grad();
    }
    EXPECT_EQ(b.state().params.at("spare.weight").step, 2) << "a parameter without a gradient is not updated";
  }
}

TEST(FusedClipAdamW, ABadNormOrTheSkipFlagLeavesParametersMomentsAndCountsUntouched) {
  NamedParams p;
  ParameterArena arena(p.pointers(), Device::cpu());
  AdamW opt(p.named(), {});
  opt.use_arena(arena);
  kernels::cpu::AdamWOutcome outcome;
  p.set_grads(0, 1.0f);
  opt.fused_step(1.0f, nullptr, &outcome);  // one applied step, so that the moments are not zero
  ASSERT_EQ(outcome.applied, 1);
  const AdamWState before = opt.state();
  std::vector<std::vector<float>> values;
  for (const Tensor& t : p.tensors) values.push_back(t.to_vector());
  auto expect_untouched = [&](const char* why) {
    EXPECT_EQ(outcome.applied, 0) << why;
    for (size_t i = 0; i < p.tensors.size(); ++i)
      EXPECT_EQ(p.tensors[i].to_vector(), values[i]) << why << ": " << p.names[i];
    const AdamWState after = opt.state();
    EXPECT_EQ(after.step_count, before.step_count) << why;
    for (const auto& [name, s] : before.params) {
      EXPECT_TRUE(same_bits(s.exp_avg, after.params.at(name).exp_avg)) << why << ": " << name;
      EXPECT_TRUE(same_bits(s.exp_avg_sq, after.params.at(name).exp_avg_sq)) << why << ": " << name;
      EXPECT_EQ(s.step, after.params.at(name).step) << why << ": " << name;
    }
  };
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    p.set_grads(2, 1.0f);
    std::vector<float> g = p.tensors[1].grad().to_vector();
    g[3] = bad;
    p.tensors[1].set_grad(Tensor::from_vector(g, p.tensors[1].shape()));
    opt.fused_step(1.0f, nullptr, &outcome);
    EXPECT_FALSE(std::isfinite(outcome.norm));
    expect_untouched("a gradient that is not finite");
  }
  // A norm finite in double but not in f32 skips when clipping, as clip_grad_norm reports it in f32.
  p.set_grads(2, 1e37f);
  opt.fused_step(1.0f, nullptr, &outcome);
  EXPECT_TRUE(std::isfinite(outcome.norm));
  EXPECT_FALSE(std::isfinite(static_cast<float>(outcome.norm)));
  expect_untouched("a norm past f32 when clipping");
  p.set_grads(2, 1.0f);
  const int32_t skip = 1;
  opt.fused_step(1.0f, &skip, &outcome);
  EXPECT_TRUE(std::isfinite(outcome.norm)) << "the norm is still measured";
  expect_untouched("the skip flag");
  const int32_t go = 0;
  opt.fused_step(1.0f, &go, &outcome);
  EXPECT_EQ(outcome.applied, 1);
  EXPECT_EQ(opt.step_count(), before.step_count + 1);
}

// A checkpoint of an optimizer that stepped on the arena loads into one that steps per tensor
// and back: the counts travel with the state, wherever the update kept them.
TEST(FusedClipAdamW, StateMovesBetweenTheFusedAndThePerTensorUpdate) {
  NamedParams fused, per_tensor;
  ParameterArena arena(fused.pointers(), Device::cpu());
  AdamW b(fused.named(), {}), a(per_tensor.named(), {});
  b.use_arena(arena);
  kernels::cpu::AdamWOutcome outcome;
  for (int step = 0; step < 3; ++step) {
    fused.set_grads(step, 1.0f);
    b.fused_step(0.0f, nullptr, &outcome);
  }
  a.load_state(b.state());
  for (size_t i = 0; i < fused.tensors.size(); ++i) per_tensor.tensors[i].copy_from(fused.tensors[i]);
  for (int step = 3; step < 5; ++step) {
    fused.set_grads(step, 1.0f);
    per_tensor.set_grads(step, 1.0f);
    b.fused_step(0.0f, nullptr, &outcome);
    a.step();
    expect_same_state(a, b);
  }
  b.load_state(a.state());  // and back: the fused update continues from the loaded counts
  fused.set_grads(5, 1.0f);
  per_tensor.set_grads(5, 1.0f);
  b.fused_step(0.0f, nullptr, &outcome);
  a.step();
  expect_same_state(a, b);
  for (size_t i = 0; i < fused.tensors.size(); ++i) EXPECT_TRUE(same_bits(per_tensor.tensors[i], fused.tensors[i]));
}

TEST(FusedClipAdamW, TheFactorIsClipGradNormsAndOneWithinTheBound) {
  EXPECT_EQ(clip_factor(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_factor(2.0, 0.0f), 1.0f) << "max_norm 0: no clipping";
  EXPECT_EQ(clip_factor(2.0, 1.0f), static_cast<float>(1.0 / (2.0 + 1e-6)));
}

}  // namespace
}  // namespace tarn
