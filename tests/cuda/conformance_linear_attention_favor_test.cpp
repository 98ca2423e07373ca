// The CUDA FAVOR+ feature map (kernels/cuda/linear_attention_favor.cu: projection GEMM, then the
// stabilised exp in one row-wise pass) against the CPU's favor_forward / favor_backward
// (kernels/feature_maps.h), for each stabiliser, on slices and rows that are not multiples of
// a warp or a block, m != d, with ordinary and large-magnitude inputs (per_row and per_slice
// keep exp in range: no inf or NaN); and favor features through the CUDA attention kernel
// against the same pipeline on the CPU. Under every emulated thread order and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/favor_bound.h"
#include "tests/cuda/linear_attention_bound.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;
using cpu::FavorStabilizer;

// Tolerance: per element, both sides' running error bounds of the favor formula
// (tests/cuda/favor_bound.h).

const char* StabName(FavorStabilizer s) {
  return s == FavorStabilizer::none ? "none" : s == FavorStabilizer::per_row ? "per_row" : "per_slice";
}

std::vector<float> Projection(int64_t m, int64_t d, uint32_t seed) {
  const auto normals = Random(cpu::favor_projection_normal_count(m, d), -1.7f, 1.7f, seed);
  std::vector<float> w(m * d);
  cpu::favor_projection_from_normals(m, d, normals.data(), w.data());
  return w;
}

bool AllFinite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

class FavorConformance : public Conformance {
 protected:
  void Check(const cpu::FavorDims& g, FavorStabilizer stab, float magnitude, uint32_t seed) {
    const std::string what = std::string(StabName(stab)) + " slices=" + std::to_string(g.slices) +
                             " rows=" + std::to_string(g.rows) + " d=" + std::to_string(g.d) +
                             " m=" + std::to_string(g.m) + " |x|<=" + std::to_string(magnitude);
    const auto x = Random(g.slices * g.rows * g.d, -magnitude, magnitude, seed);
    const auto w = Projection(g.m, g.d, seed + 1);
    const auto dy = Random(g.slices * g.rows * g.m, -1.0f, 1.0f, seed + 2);
    std::vector<float> want_y(g.slices * g.rows * g.m), want_dx(x.size());
    cpu::favor_forward(g, stab, x.data(), w.data(), want_y.data());
    {
      std::vector<float> ws(cpu::favor_backward_workspace_floats(g));
      cpu::favor_backward(g, stab, x.data(), w.data(), want_y.data(), dy.data(), want_dx.data(), ws.data(),
                          ws.size());
    }
    auto dx_in = dev(x), dw = dev(w), ddy = dev(dy);
    auto got_y = out(want_y.size());
    TARN_ON(target(), favor_forward, g, stab, dx_in.get(), dw.get(), got_y.get());
    const FavorBound bound = FavorBoth(target(), g, stab, x, w, want_y, dy);
    EXPECT_TRUE(WithinBound(got_y.host(), want_y, Errors(bound.y))) << "y, " << what;
    if (stab != FavorStabilizer::none) {
      EXPECT_TRUE(AllFinite(got_y.host())) << "y, " << what;
    }

    // Backward from the CPU's y, so that it is compared on its own.
    auto y_in = dev(want_y);
    auto got_dx = out(want_dx.size());
    const size_t n = TARN_ON(target(), favor_backward_workspace_floats, g);
    auto ws = out(n);
    TARN_ON(target(), favor_backward, g, stab, dx_in.get(), dw.get(), y_in.get(), ddy.get(), got_dx.get(), ws.get(),
            n);
    // dx sums m terms of either sign: its bound follows the terms, not dx.
    EXPECT_TRUE(WithinBound(got_dx.host(), want_dx, Errors(bound.dx))) << "dx, " << what;
    if (stab != FavorStabilizer::none) {
      EXPECT_TRUE(AllFinite(got_dx.host())) << "dx, " << what;
    }
  }
};

TEST_P(FavorConformance, ForwardAndBackwardMatchCpuForEveryStabilizer) {
  uint32_t seed = 2000;
  for (FavorStabilizer stab : {FavorStabilizer::none, FavorStabilizer::per_row, FavorStabilizer::per_slice}) {
    Check({3, 65, 32, 48}, stab, 1.0f, seed += 4);
    Check({2, 33, 64, 40}, stab, 1.0f, seed += 4);
  }
}

// |x| up to 12 with d = 32: h - |x'|^2 / 2 reaches far past ln(FLT_MAX) in magnitude; the
// stabilisers keep every value finite, and per_slice still finds the first argmax of a slice
// larger than one block's stride.
TEST_P(FavorConformance, LargeInputsStayFiniteWithStabilizers) {
  uint32_t seed = 2100;
  for (FavorStabilizer stab : {FavorStabilizer::per_row, FavorStabilizer::per_slice})
    Check({2, 70, 32, 64}, stab, 12.0f, seed += 4);
}

// favor features (queries per_row, keys per_slice, as framework/ops/attention.cpp) through the
// CUDA attention kernel with feature_map identity, forward and backward into x, against the
// same chain on the CPU.
TEST_P(FavorConformance, FavorFeaturesThroughCausalAttentionMatchCpu) {
  const int64_t B = 2, H = 1, N = 65, d = 32, m = 48, e = 40;
  const cpu::FavorDims g{B * H, N, d, m};
  const auto q = Random(B * H * N * d, -1.0f, 1.0f, 2200);
  const auto k = Random(B * H * N * d, -1.0f, 1.0f, 2201);
  const auto v = Random(B * H * N * e, -1.0f, 1.0f, 2202);
  const auto w = Projection(m, d, 2203);
  const cpu::LinearAttentionDims dims{B, H, N, N, m, e};
  cpu::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.feature_map = cpu::FeatureMap::identity;

  std::vector<float> fq(B * H * N * m), fk(fq.size()), want_out(B * H * N * e), den(B * H * N);
  cpu::favor_forward(g, FavorStabilizer::per_row, q.data(), w.data(), fq.data());
  cpu::favor_forward(g, FavorStabilizer::per_slice, k.data(), w.data(), fk.data());
  std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
  cpu::linear_attention_forward(dims, cfg, fq.data(), fk.data(), v.data(), want_out.data(), den.data(), ws.data(),
                                ws.size());

  auto dq = dev(q), dk = dev(k), dv = dev(v), dw = dev(w);
  auto gq = out(fq.size()), gk = out(fk.size()), got_out = out(want_out.size()), got_den = out(den.size());
  TARN_ON(target(), favor_forward, g, FavorStabilizer::per_row, dq.get(), dw.get(), gq.get());
  TARN_ON(target(), favor_forward, g, FavorStabilizer::per_slice, dk.get(), dw.get(), gk.get());
  const size_t n = TARN_ON(target(), linear_attention_forward_workspace_floats, dims, cfg);
  auto dws = out(n);
  TARN_ON(target(), linear_attention_forward, dims, cfg, gq.get(), gk.get(), dv.get(), got_out.get(), got_den.get(),
          dws.get(), n);
  // The features already differ by favor's bound (per_row for the queries, per_slice for the
  // keys); the attention kernel's bound (tests/cuda/linear_attention_bound.h) carries that
  // through its products and adds its own roundings and the CPU's.
  const std::vector<double> fq_apart = Errors(FavorBoth(target(), g, FavorStabilizer::per_row, q, w, {}, {}).y);
  const std::vector<double> fk_apart = Errors(FavorBoth(target(), g, FavorStabilizer::per_slice, k, w, {}, {}).y);
  LinearAttentionBoundConfig bcfg;
  bcfg.causal = true;
  bcfg.a_apart = &fq_apart;
  bcfg.b_apart = &fk_apart;
  const LinearAttentionBounds bound =
      LinearAttentionErrorBounds(dims, bcfg, fq, fk, v, {}, {}, {}, {kCudaF32, kCpuF32});
  EXPECT_TRUE(WithinBound(got_out.host(), want_out, bound.out));
  EXPECT_TRUE(WithinBound(got_den.host(), den, bound.den));
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FavorConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
