// Initialisers (framework/init.h): the draws are exactly the generator's stream, whatever the
// thread count; the bounds and spreads are PyTorch's; BART's init is HuggingFace's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/init.h"
#include "kernels/parallel.h"

namespace tarn {
namespace {

// Large enough that the fills take their parallel path (kernels::kParallelGrain).
constexpr int64_t kBig = 3 * kernels::kParallelGrain + 17;

struct Moments {
  double mean, var, min, max;
};
Moments moments(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  double s = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
  for (float x : v) {
    s += x;
    s2 += static_cast<double>(x) * x;
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  const double n = static_cast<double>(v.size()), mean = s / n;
  return {mean, s2 / n - mean * mean, lo, hi};
}

// Restores the thread count on scope exit, so one test cannot change the next one's.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(kernels::num_threads()) { kernels::set_num_threads(n); }
  ~ThreadCount() { kernels::set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(Init, NormalFillEqualsSequentialNormalDrawsAndAdvancesTheGenerator) {
  Tensor t = Tensor::empty({kBig});
  Philox rng(31, 4, 6);  // a mid-block start
  init::normal_(t, 1.5f, 0.25f, rng);
  Philox reference(31, 4, 6);
  const float* p = t.f32();
  for (int64_t i = 0; i < kBig; ++i) ASSERT_EQ(p[i], 1.5f + 0.25f * reference.normal()) << "element " << i;
  EXPECT_EQ(rng.state().offset, reference.state().offset);
  EXPECT_EQ(rng.next_u32(), reference.next_u32());
}

TEST(Init, UniformFillEqualsSequentialUniformDrawsAndAdvancesTheGenerator) {
  Tensor t = Tensor::empty({kBig});
  Philox rng(8, 1, 3);
  init::uniform_(t, -2.0f, 3.0f, rng);
  Philox reference(8, 1, 3);
  const float* p = t.f32();
  for (int64_t i = 0; i < kBig; ++i) ASSERT_EQ(p[i], -2.0f + 5.0f * reference.uniform()) << "element " << i;
  EXPECT_EQ(rng.state().offset, reference.state().offset);
}

TEST(Init, FillsDoNotDependOnTheThreadCount) {
  std::vector<float> one, two;
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    Tensor n = Tensor::empty({kBig}), u = Tensor::empty({kBig});
    Philox rng(2, 2);
    init::normal_(n, 0.0f, 1.0f, rng);
    init::uniform_(u, 0.0f, 1.0f, rng);
    std::vector<float>& out = threads == 1 ? one : two;
    out = n.to_vector();
    const std::vector<float> uv = u.to_vector();
    out.insert(out.end(), uv.begin(), uv.end());
  }
  EXPECT_EQ(one, two);
}

TEST(Init, NormalHasTheRequestedMeanAndStd) {
  Tensor t = Tensor::empty({1 << 18});
  Philox rng(5);
  init::normal_(t, 0.5f, 0.02f, rng);
  const Moments m = moments(t);
  const double n = static_cast<double>(t.numel());
  EXPECT_NEAR(m.mean, 0.5, 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(m.var), 0.02, 5 * 0.02 / std::sqrt(2 * n));
}

TEST(Init, UniformStaysInsideItsBounds) {
  Tensor t = Tensor::empty({1 << 16});
  Philox rng(6);
  init::uniform_(t, -0.1f, 0.3f, rng);
  const Moments m = moments(t);
  EXPECT_GT(m.min, -0.1);
  EXPECT_LE(m.max, 0.3 + 1e-7);
  EXPECT_NEAR(m.mean, 0.1, 0.01);
}

TEST(Init, ZerosAndOnesFillEveryElement) {
  Tensor t = Tensor::full({5, 7}, 3.0f);
  init::zeros_(t);
  for (float x : t.to_vector()) EXPECT_EQ(x, 0.0f);
  init::ones_(t);
  for (float x : t.to_vector()) EXPECT_EQ(x, 1.0f);
}

TEST(Init, FansFollowPyTorchIncludingTheReceptiveField) {
  const init::Fans linear = init::fans(Tensor::empty({64, 16}));  // (out, in)
  EXPECT_EQ(linear.fan_in, 16);
  EXPECT_EQ(linear.fan_out, 64);
  const init::Fans conv = init::fans(Tensor::empty({8, 3, 5, 5}));
  EXPECT_EQ(conv.fan_in, 3 * 25);
  EXPECT_EQ(conv.fan_out, 8 * 25);
  EXPECT_THROW(init::fans(Tensor::empty({10})), Error);
}

TEST(Init, XavierUniformBoundIsGainTimesSqrtSixOverFanSum) {
  Tensor w = Tensor::empty({300, 200});
  Philox rng(12);
  init::xavier_uniform_(w, rng, 2.0f);
  const double bound = 2.0 * std::sqrt(6.0 / 500.0);
  const Moments m = moments(w);
  EXPECT_GE(m.min, -bound);
  EXPECT_LE(m.max, bound);
  EXPECT_GT(m.max, 0.99 * bound);  // 60000 draws reach the edges
  EXPECT_NEAR(m.var, bound * bound / 3.0, 0.02 * bound * bound / 3.0);
}

TEST(Init, LinearDefaultIsUniformOverOneOverSqrtFanIn) {
  Tensor w = Tensor::empty({256, 100}), b = Tensor::empty({256});
  Philox rng(13);
  init::linear_default_(w, b, rng);
  const double bound = 1.0 / std::sqrt(100.0);  // kaiming_uniform(a = sqrt 5) reduces to this
  const Moments mw = moments(w), mb = moments(b);
  EXPECT_GE(mw.min, -bound);
  EXPECT_LE(mw.max, bound);
  EXPECT_GT(mw.max, 0.99 * bound);
  EXPECT_NEAR(mw.var, bound * bound / 3.0, 0.03 * bound * bound / 3.0);
  EXPECT_GE(mb.min, -bound);
  EXPECT_LE(mb.max, bound);
  EXPECT_GT(mb.max - mb.min, bound);  // the bias was drawn, not left alone
}

TEST(Init, KaimingUniformWithReluGainHasVarianceTwoOverFanIn) {
  Tensor w = Tensor::empty({512, 64});
  Philox rng(14);
  init::kaiming_uniform_(w, rng, 0.0f);
  EXPECT_NEAR(moments(w).var, 2.0 / 64.0, 0.03 * 2.0 / 64.0);
}

TEST(Init, BartEmbeddingZeroesOnlyThePaddingRow) {
  Tensor w = Tensor::empty({10, 32});
  Philox rng(15);
  init::bart_embedding_(w, rng, 1);
  const float* p = w.f32();
  for (int64_t r = 0; r < 10; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < 32; ++c) sq += p[r * 32 + c] * p[r * 32 + c];
    if (r == 1)
      EXPECT_EQ(sq, 0.0);
    else
      EXPECT_GT(sq, 0.0) << "row " << r;
  }
  EXPECT_THROW(init::bart_embedding_(w, rng, 10), Error);
}

// A module tree spelled with BART's HF names, for bart_init_.
struct FakeLinear : Module {
  Tensor weight = Tensor::full({6, 4}, 9.0f), bias = Tensor::full({6}, 9.0f);
  FakeLinear() {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
};
struct FakeNorm : Module {
  Tensor weight = Tensor::full({4}, 9.0f), bias = Tensor::full({4}, 9.0f);
  FakeNorm() {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
};
struct FakeEmbedding : Module {
  Tensor weight = Tensor::full({12, 4}, 9.0f);
  FakeEmbedding() { register_parameter("weight", weight); }
};
struct FakeBart : Module {
  FakeEmbedding shared, embed_positions;
  FakeLinear fc1;
  FakeNorm self_attn_layer_norm, layernorm_embedding;
  Tensor final_logits_bias = Tensor::full({1, 12}, 9.0f);
  FakeBart() {
    register_module("model.shared", shared);
    register_module("model.encoder.embed_positions", embed_positions);
    register_module("model.encoder.layers.0.fc1", fc1);
    register_module("model.encoder.layers.0.self_attn_layer_norm", self_attn_layer_norm);
    register_module("model.encoder.layernorm_embedding", layernorm_embedding);
    register_parameter("final_logits_bias", final_logits_bias);
  }
};

TEST(Init, BartInitFollowsHuggingFaceByParameterName) {
  FakeBart m;
  Philox rng(16);
  init::bart_init_(m, rng, {0.02f, 1});
  const auto all = [](const Tensor& t, float v) {
    for (float x : t.to_vector())
      if (x != v) return false;
    return true;
  };
  EXPECT_TRUE(all(m.fc1.bias, 0.0f));
  EXPECT_TRUE(all(m.final_logits_bias, 0.0f));
  EXPECT_TRUE(all(m.self_attn_layer_norm.weight, 1.0f));
  EXPECT_TRUE(all(m.self_attn_layer_norm.bias, 0.0f));
  EXPECT_TRUE(all(m.layernorm_embedding.weight, 1.0f));
  EXPECT_TRUE(all(m.shared.weight.narrow0(1, 2), 0.0f));  // <pad>
  EXPECT_FALSE(all(m.embed_positions.weight.narrow0(1, 2), 0.0f));  // positions have no padding row
  for (const Tensor* t : {&m.fc1.weight, &m.shared.weight, &m.embed_positions.weight}) {
    const Moments mo = moments(*t);
    EXPECT_LT(mo.max, 0.02 * 5);
    EXPECT_GT(mo.max, 0.0);
    EXPECT_LT(mo.min, 0.0);
  }
}

}  // namespace
}  // namespace tarn
