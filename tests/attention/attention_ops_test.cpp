// The Tensor-level attention ops (framework/ops/attention.h): finite-difference gradient
// checks through every feature map, fused = unfused, recurrent = parallel, FAVOR+ projection
// state, and peak memory linear in N.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "tests/attention/reference.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

using attention_test::Doubles;
using testing::gradients_match;
using testing::GradcheckOptions;
using testing::random_tensor;

Tensor leaf(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = random_tensor(shape, seed, lo, hi);
  t.set_requires_grad(true);
  return t;
}

// Padding for B = 2: batch 0 pads keys 1 and 3, batch 1 pads its first key.
Tensor padding(int64_t n_k) {
  std::vector<float> p(2 * n_k, 0.0f);
  if (n_k > 3) p[1] = p[3] = 1.0f;
  p[n_k] = 1.0f;
  return Tensor::from_vector(p, Shape{2, n_k});
}

struct GradCase {
  FeatureMap map;
  bool causal;
  bool mask;
  bool fused;
};

std::string case_name(const ::testing::TestParamInfo<GradCase>& info) {
  const GradCase& c = info.param;
  return std::string(feature_map_name(c.map)) + (c.causal ? "_causal" : "_bidirectional") +
         (c.mask ? "_mask" : "") + (c.fused ? "_fused" : "");
}

class LinearAttentionGradcheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(LinearAttentionGradcheck, GradientsMatchFiniteDifferencesThroughTheFeatureMap) {
  const GradCase c = GetParam();
  const int64_t B = 2, H = 2, N = 7, d = 4, e = 3;
  // relu and exp have kinks (zero, the row max): keep inputs a step size away from them.
  const float lo = c.map == FeatureMap::identity ? 0.2f : -1.0f;
  Tensor q = leaf({B, H, N, d}, 1, lo, 1.0f), k = leaf({B, H, N, d}, 2, lo, 1.0f);
  Tensor v = leaf({B, H, N, e}, 3);
  if (c.map == FeatureMap::relu || c.map == FeatureMap::exp) {
    // Distinct values on a grid: none within 0.025 of 0 or of another in its row, far beyond
    // the finite-difference step.
    for (Tensor* t : {&q, &k}) {
      float* p = t->f32();
      for (int64_t i = 0; i < t->numel(); ++i) {
        const int64_t slot = (i * 7 + (t == &k ? 3 : 0)) % (2 * d + 1);
        p[i] = -0.875f + 0.2f * float(slot) + 0.05f * float((i / d) % 3);
      }
    }
  }
  Philox rng(11);
  const Tensor w = draw_favor_projection(rng, 6, d);
  LinearAttentionOptions opt;
  opt.causal = c.causal;
  opt.chunk = 3;  // several chunks and a tail at N = 7
  if (c.mask) opt.key_padding_mask = padding(N);
  if (c.fused) opt.fused_feature_map = c.map;
  auto fn = [&](const std::vector<Tensor>& in) {
    if (c.fused) return linear_attention(in[0], in[1], in[2], opt);
    return linear_attention(feature_map(in[0], c.map, FeatureRole::query, w),
                            feature_map(in[1], c.map, FeatureRole::key, w), in[2], opt);
  };
  GradcheckOptions gopt;
  gopt.eps = 1e-3;
  gopt.atol = 1e-3;
  EXPECT_TRUE(gradients_match(fn, {q, k, v}, gopt));
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cs;
  for (FeatureMap m : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::favor,
                       FeatureMap::identity})
    for (bool causal : {true, false}) cs.push_back({m, causal, false, false});
  cs.push_back({FeatureMap::elu1, true, true, false});
  cs.push_back({FeatureMap::favor, false, true, false});
  for (FeatureMap m : {FeatureMap::elu1, FeatureMap::exp}) {
    cs.push_back({m, true, true, true});
    cs.push_back({m, false, false, true});
  }
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Ops, LinearAttentionGradcheck, ::testing::ValuesIn(grad_cases()),
                         case_name);

TEST(LinearAttentionOp, CrossAttentionGradientsMatchFiniteDifferences) {
  Tensor a = leaf({1, 2, 5, 4}, 4, 0.1f, 1.0f), b = leaf({1, 2, 9, 4}, 5, 0.1f, 1.0f);
  Tensor v = leaf({1, 2, 9, 6}, 6);
  auto fn = [](const std::vector<Tensor>& in) { return linear_attention(in[0], in[1], in[2]); };
  GradcheckOptions gopt;
  gopt.eps = 1e-3;
  gopt.atol = 1e-3;
  EXPECT_TRUE(gradients_match(fn, {a, b, v}, gopt));
}

TEST(LinearAttentionOp, FusedFeatureMapEqualsFeatureMapThenAttention) {
  const int64_t B = 2, H = 2, N = 150, d = 32, e = 24;
  for (FeatureMap map : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp}) {
    std::vector<std::vector<float>> outs, grads;
    for (bool fused : {false, true}) {
      Tensor q = leaf({B, H, N, d}, 7), k = leaf({B, H, N, d}, 8), v = leaf({B, H, N, e}, 9);
      LinearAttentionOptions opt;
      opt.causal = true;
      opt.key_padding_mask = padding(N);
      Tensor out;
      if (fused) {
        opt.fused_feature_map = map;
        out = linear_attention(q, k, v, opt);
      } else {
        out = linear_attention(feature_map(q, map), feature_map(k, map, FeatureRole::key), v, opt);
      }
      out.backward(random_tensor(out.shape(), 10));
      outs.push_back(out.to_vector());
      for (const Tensor* t : {&q, &k, &v}) grads.push_back(t->grad().to_vector());
    }
    EXPECT_LE(attention_test::relative_error(outs[1], Doubles(outs[0].begin(), outs[0].end())), 1e-6);
    for (int i = 0; i < 3; ++i)
      EXPECT_LE(attention_test::relative_error(grads[3 + i], Doubles(grads[i].begin(), grads[i].end())),
                1e-6)
          << feature_map_name(map) << " input " << i;
  }
}

TEST(LinearAttentionOp, RecurrentStepsEqualTheCausalOpPositionByPosition) {
  const int64_t B = 2, H = 3, N = 40, d = 16, e = 12;
  const Tensor q = random_tensor({B, H, N, d}, 12), k = random_tensor({B, H, N, d}, 13);
  const Tensor v = random_tensor({B, H, N, e}, 14);
  const Tensor mask = padding(N);
  LinearAttentionOptions opt;
  opt.causal = true;
  opt.key_padding_mask = mask;
  opt.fused_feature_map = FeatureMap::elu1;
  const std::vector<float> parallel = linear_attention(q, k, v, opt).to_vector();

  LinearAttentionState state = LinearAttentionState::zeros(B, H, d, e);
  LinearAttentionStepOptions sopt;
  sopt.fused_feature_map = FeatureMap::elu1;
  double worst = 0.0, scale = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    Tensor qt = Tensor::empty({B, H, d}), kt = Tensor::empty({B, H, d}), vt = Tensor::empty({B, H, e});
    for (int64_t bh = 0; bh < B * H; ++bh) {
      std::copy_n(q.f32() + (bh * N + t) * d, d, qt.f32() + bh * d);
      std::copy_n(k.f32() + (bh * N + t) * d, d, kt.f32() + bh * d);
      std::copy_n(v.f32() + (bh * N + t) * e, e, vt.f32() + bh * e);
    }
    sopt.key_padding_mask = Tensor::from_vector({mask.f32()[t], mask.f32()[N + t]}, Shape{B});
    const std::vector<float> out = linear_attention_step(state, qt, kt, vt, sopt).to_vector();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t x = 0; x < e; ++x) {
        const double ref = parallel[(bh * N + t) * e + x];
        worst = std::max(worst, std::abs(out[bh * e + x] - ref));
        scale = std::max(scale, std::abs(ref));
      }
  }
  EXPECT_EQ(state.steps, N);
  EXPECT_LE(worst / scale, 1e-5);
}

TEST(LinearAttentionOp, FavorRecurrentStepsEqualTheCausalOpWithUnstabilizedKeys) {
  const int64_t B = 1, H = 2, N = 30, d = 16, e = 8, m = 32;
  Philox rng(3);
  const Tensor w = draw_favor_projection(rng, m, d);
  const Tensor q = random_tensor({B, H, N, d}, 22), k = random_tensor({B, H, N, d}, 23);
  const Tensor v = random_tensor({B, H, N, e}, 24);
  const Tensor a = feature_map(q, FeatureMap::favor, FeatureRole::query, w);
  const Tensor b = feature_map(k, FeatureMap::favor, FeatureRole::unstabilized, w);
  LinearAttentionOptions opt;
  opt.causal = true;
  const std::vector<float> parallel = linear_attention(a, b, v, opt).to_vector();
  LinearAttentionState state = LinearAttentionState::zeros(B, H, m, e);
  double worst = 0.0, scale = 0.0;
  for (int64_t t = 0; t < N; ++t) {
    Tensor qt = Tensor::empty({B, H, 1, d}), kt = Tensor::empty({B, H, 1, d});
    Tensor vt = Tensor::empty({B, H, 1, e});
    for (int64_t bh = 0; bh < B * H; ++bh) {
      std::copy_n(q.f32() + (bh * N + t) * d, d, qt.f32() + bh * d);
      std::copy_n(k.f32() + (bh * N + t) * d, d, kt.f32() + bh * d);
      std::copy_n(v.f32() + (bh * N + t) * e, e, vt.f32() + bh * e);
    }
    const Tensor at = feature_map(qt, FeatureMap::favor, FeatureRole::query, w);
    const Tensor bt = feature_map(kt, FeatureMap::favor, FeatureRole::unstabilized, w);
    const std::vector<float> out = linear_attention_step(state, at, bt, vt).to_vector();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t x = 0; x < e; ++x) {
        const double ref = parallel[(bh * N + t) * e + x];
        worst = std::max(worst, std::abs(out[bh * e + x] - ref));
        scale = std::max(scale, std::abs(ref));
      }
  }
  EXPECT_LE(worst / scale, 1e-5);
}

TEST(LinearAttentionOp, BadShapesAreReportedWithTheShapes) {
  const Tensor a = Tensor::zeros({1, 2, 5, 4}), b = Tensor::zeros({1, 2, 6, 4});
  const Tensor v = Tensor::zeros({1, 2, 6, 3});
  LinearAttentionOptions opt;
  opt.causal = true;
  try {
    linear_attention(a, b, v, opt);
    FAIL() << "causal with 5 queries and 6 keys must throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("(1, 2, 6, 4)"), std::string::npos) << err.what();
  }
  opt.causal = false;
  opt.key_padding_mask = Tensor::zeros({1, 5});
  EXPECT_THROW(linear_attention(a, b, v, opt), Error);
  EXPECT_THROW(parse_feature_map("softplus"), Error);
  EXPECT_EQ(parse_feature_map("favor"), FeatureMap::favor);
}

// Peak bytes of an op-level causal forward + backward (fused elu1), with Q, K, V and dO live
// before it starts, as a multiple of the bytes of (Q, K, V, O, dO, dQ, dK, dV).
double causal_peak_over_tensors(int64_t n, int64_t* peak_bytes) {
  const int64_t B = 1, H = 2, d = 64;
  Tensor q = leaf({B, H, n, d}, 15), k = leaf({B, H, n, d}, 16), v = leaf({B, H, n, d}, 17);
  const Tensor dout = random_tensor({B, H, n, d}, 18);
  reset_peak_memory();
  {
    LinearAttentionOptions opt;
    opt.causal = true;
    opt.fused_feature_map = FeatureMap::elu1;
    Tensor out = linear_attention(q, k, v, opt);
    out.backward(dout);
  }
  *peak_bytes = memory_stats().peak_bytes;
  const double tensors = 8.0 * B * H * n * d * sizeof(float);
  return double(*peak_bytes) / tensors;
}

TEST(LinearAttentionOp, CausalForwardBackwardPeakMemoryIsLinearInN) {
  int64_t peak_small = 0, peak_large = 0;
  const double small = causal_peak_over_tensors(4096, &peak_small);
  const double large = causal_peak_over_tensors(16384, &peak_large);
  std::printf("[ memory   ] causal fwd+bwd peak / size(Q,K,V,O,dO,dQ,dK,dV): %.4f at N = 4096, "
              "%.4f at N = 16384; growth x%.3f\n",
              small, large, double(peak_large) / double(peak_small));
  EXPECT_LE(small, 1.25) << "peak " << peak_small << " bytes at N = 4096";
  EXPECT_LE(large, 1.25) << "peak " << peak_large << " bytes at N = 16384";
  EXPECT_LE(double(peak_large) / double(peak_small), 4.4);
}

TEST(SoftmaxAttentionOp, GradientsMatchFiniteDifferencesWithMasks) {
  for (bool causal : {true, false}) {
    Tensor q = leaf({2, 2, 6, 4}, 19), k = leaf({2, 2, 6, 4}, 20), v = leaf({2, 2, 6, 5}, 21);
    SoftmaxAttentionOptions opt;
    opt.causal = causal;
    opt.key_padding_mask = padding(6);
    auto fn = [&](const std::vector<Tensor>& in) { return softmax_attention(in[0], in[1], in[2], opt); };
    EXPECT_TRUE(gradients_match(fn, {q, k, v})) << "causal " << causal;
  }
}

TEST(SoftmaxAttentionOp, SlidingWindowGradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    Tensor q = leaf({2, 2, 9, 4}, 22), k = leaf({2, 2, 9, 4}, 23), v = leaf({2, 2, 9, 5}, 24);
    SoftmaxAttentionOptions opt;
    opt.causal = causal;
    opt.window = 3;
    opt.key_padding_mask = padding(9);
    auto fn = [&](const std::vector<Tensor>& in) { return softmax_attention(in[0], in[1], in[2], opt); };
    EXPECT_TRUE(gradients_match(fn, {q, k, v})) << "causal " << causal;
  }
}

TEST(SoftmaxAttentionOp, SlidingWindowWiderThanTheSequenceIsFullAttention) {
  for (int64_t dh : {8, 40}) {
    Tensor q = leaf({1, 2, 7, dh}, 25), k = leaf({1, 2, 7, dh}, 26), v = leaf({1, 2, 7, 5}, 27);
    for (bool causal : {true, false}) {
      SoftmaxAttentionOptions full, wide, narrow;
      full.causal = wide.causal = narrow.causal = causal;
      wide.window = 64;
      narrow.window = 2;
      const std::vector<float> a = softmax_attention(q, k, v, full).to_vector();
      const std::vector<float> b = softmax_attention(q, k, v, wide).to_vector();
      const std::vector<float> c = softmax_attention(q, k, v, narrow).to_vector();
      ASSERT_EQ(a.size(), b.size());
      double diff_wide = 0, diff_narrow = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        diff_wide = std::max(diff_wide, double(std::fabs(a[i] - b[i])));
        diff_narrow = std::max(diff_narrow, double(std::fabs(a[i] - c[i])));
      }
      EXPECT_LE(diff_wide, 1e-6) << "dh " << dh << " causal " << causal;
      EXPECT_GT(diff_narrow, 1e-3) << "dh " << dh << " causal " << causal << ": a window of 2 changed nothing";
    }
  }
}

TEST(FavorProjectionState, RedrawsEveryKStepsAndResumesIdentically) {
  FavorProjection p;
  p.m = 8, p.d = 4, p.redraw_every = 3, p.rng = {42, 7, 0};
  p.draw();
  const std::vector<float> first = p.w.to_vector();
  EXPECT_FALSE(p.step());
  EXPECT_FALSE(p.step());
  const FavorProjection saved = p;  // what a checkpoint keeps: w, rng, steps
  EXPECT_TRUE(p.step());
  EXPECT_NE(p.w.to_vector(), first);
  FavorProjection resumed = saved;
  resumed.w = saved.w.clone();
  EXPECT_TRUE(resumed.step());
  EXPECT_EQ(resumed.w.to_vector(), p.w.to_vector());
}

}  // namespace
}  // namespace tarn
