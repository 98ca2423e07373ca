// The bf16 FAVOR+ feature map (kernels/cuda/linear_attention_bf16_favor.cu) against the CPU's
// favor_forward / favor_backward (kernels/feature_maps.h) on the same bf16-rounded inputs, for
// each stabiliser, on slices and rows that are not multiples of a warp or a block and m != d;
// and favor features through the bf16 attention kernels (feature_map identity), forward and
// backward into q and k, against the same chain on the CPU with the same roundings to bf16.
// Under every emulated thread order and on a GPU.
//
// Tolerances. The favor kernels compute in f32 on the exact bf16 values the CPU sees and round
// the result once to bf16 (2^-8 relative: 7 explicit mantissa bits, round to nearest): each y
// and dx within that rounding plus both sides' f32 bounds of tests/cuda/favor_bound.h. Through
// attention, the bf16 attention kernels' own roundings (bf16 features, chunk products and
// states, 2^-8 each) add the error their conformance test bounds (by the response to inputs
// jittered by a rounding's size): out and den are checked within 1e-2 of their size and of
// their largest value (measured: under 3e-3), dq and dk, sums of terms of either sign, within
// 3e-2 (measured: about 1.2e-2). Those bounds are the bf16 roundings', which a GPU makes as the
// emulator does; its f32 sums on tensor cores (u = 2^-23, truncating) add at most
// gamma_{N+d+e}(2^-23) < 4e-5 of the terms here (N = 130, d = 48, e = 40), under 1% of the
// room left. A wrong feature, stabiliser or conversion is off by the output's whole size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_linear_attention_bf16.h"
#include "kernels/emu/bf16.h"
#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/favor_bound.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;
using cpu::FavorStabilizer;

constexpr float kChainForward = 1e-2f;       // out, den through the bf16 attention kernels
constexpr float kChainGradient = 3e-2f;      // dq, dk through them

const char* StabName(FavorStabilizer s) {
  return s == FavorStabilizer::none ? "none" : s == FavorStabilizer::per_row ? "per_row" : "per_slice";
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

std::vector<float> Projection(int64_t m, int64_t d, uint32_t seed) {
  const auto normals = Random(cpu::favor_projection_normal_count(m, d), -1.7f, 1.7f, seed);
  std::vector<float> w(m * d);
  cpu::favor_projection_from_normals(m, d, normals.data(), w.data());
  return w;
}

class FavorBf16Conformance : public Conformance {
 protected:
  DeviceArray<bf16> out_bf16(size_t n) const { return DeviceArray<bf16>(target(), n, kBf16Nan); }

  // y = favor(x) on the target, bf16 buffers on the device, each with its own workspace.
  void Forward(const cpu::FavorDims& g, FavorStabilizer stab, const bf16* x, const float* w, bf16* y) {
    const size_t n = TARN_ON(target(), favor_forward_bf16_workspace_floats, g);
    auto ws = out(n);
    TARN_ON(target(), favor_forward_bf16, g, stab, x, w, y, ws.get(), n);
  }

  void Backward(const cpu::FavorDims& g, FavorStabilizer stab, const bf16* x, const float* w, const bf16* y,
                const bf16* dy, bf16* dx) {
    const size_t n = TARN_ON(target(), favor_backward_bf16_workspace_floats, g);
    auto ws = out(n);
    TARN_ON(target(), favor_backward_bf16, g, stab, x, w, y, dy, dx, ws.get(), n);
  }

  void Check(const cpu::FavorDims& g, FavorStabilizer stab, uint32_t seed) {
    const std::string what = std::string(StabName(stab)) + " slices=" + std::to_string(g.slices) +
                             " rows=" + std::to_string(g.rows) + " d=" + std::to_string(g.d) +
                             " m=" + std::to_string(g.m);
    const auto x = RoundedRandom(g.slices * g.rows * g.d, -1.0f, 1.0f, seed);
    const auto w = Projection(g.m, g.d, seed + 1);
    const auto dy = RoundedRandom(g.slices * g.rows * g.m, -1.0f, 1.0f, seed + 2);
    std::vector<float> want_y(g.slices * g.rows * g.m), want_dx(x.size());
    cpu::favor_forward(g, stab, x.data(), w.data(), want_y.data());
    // Backward from the CPU's y as bf16 (what the bf16 forward hands on), on both sides.
    const auto y_rounded = Rounded(want_y);
    {
      std::vector<float> ws(cpu::favor_backward_workspace_floats(g));
      cpu::favor_backward(g, stab, x.data(), w.data(), y_rounded.data(), dy.data(), want_dx.data(), ws.data(),
                          ws.size());
    }
    auto dx_in = dev(ToBf16(x)), ddy = dev(ToBf16(dy)), dy_in = dev(ToBf16(y_rounded));
    auto dw = dev(w);
    auto got_y = out_bf16(want_y.size()), got_dx = out_bf16(want_dx.size());
    Forward(g, stab, dx_in.get(), dw.get(), got_y.get());
    // The f32 bounds of both sides (dx: from the rounded y both read), then the device's
    // rounding of its f32 result to bf16.
    const FavorBound bound = FavorBoth(target(), g, stab, x, w, y_rounded, dy);
    auto rounded = [](const std::vector<Bounded>& f32) {
      std::vector<double> b(f32.size());
      for (size_t i = 0; i < b.size(); ++i) b[i] = f32[i].err + kBf16 * (std::fabs(f32[i].v) + f32[i].err);
      return b;
    };
    EXPECT_TRUE(WithinBound(ToFloat(got_y.host()), want_y, rounded(bound.y))) << "y, " << what;
    Backward(g, stab, dx_in.get(), dw.get(), dy_in.get(), ddy.get(), got_dx.get());
    EXPECT_TRUE(WithinBound(ToFloat(got_dx.host()), want_dx, rounded(bound.dx))) << "dx, " << what;
  }
};

TEST_P(FavorBf16Conformance, ForwardAndBackwardMatchCpuForEveryStabilizer) {
  uint32_t seed = 3000;
  for (FavorStabilizer stab : {FavorStabilizer::none, FavorStabilizer::per_row, FavorStabilizer::per_slice}) {
    Check({3, 65, 32, 48}, stab, seed += 4);
    Check({2, 33, 64, 40}, stab, seed += 4);
  }
}

TEST_P(FavorBf16Conformance, EmptyInputsAreANoOpAndBadDimsAreRejected) {
  const cpu::FavorDims empty{2, 0, 32, 48};
  EXPECT_EQ(TARN_ON(target(), favor_forward_bf16_workspace_floats, empty), 0u);
  TARN_ON(target(), favor_forward_bf16, empty, FavorStabilizer::per_row, nullptr, nullptr, nullptr, nullptr, 0);
  const cpu::FavorDims no_features{2, 4, 32, 0};
  EXPECT_THROW(TARN_ON(target(), favor_forward_bf16_workspace_floats, no_features), tarn::Error);
  const cpu::FavorDims ok{1, 4, 8, 8};
  std::vector<float> small(4);
  EXPECT_THROW(TARN_ON(target(), favor_backward_bf16, ok, FavorStabilizer::none, nullptr, nullptr, nullptr, nullptr,
                       nullptr, small.data(), small.size()),
               tarn::Error);
}

// favor features (queries per_row, keys per_slice, as framework/ops/attention.cpp) through the
// bf16 causal attention kernels, forward and backward into q and k, against the CPU chain with
// the features and their gradients rounded to bf16 where the bf16 chain stores them.
TEST_P(FavorBf16Conformance, FavorFeaturesThroughBf16CausalAttentionMatchCpu) {
  const int64_t B = 2, H = 1, N = 130, d = 32, m = 48, e = 40;
  const cpu::FavorDims g{B * H, N, d, m};
  const auto q = RoundedRandom(B * H * N * d, -1.0f, 1.0f, 3200);
  const auto k = RoundedRandom(B * H * N * d, -1.0f, 1.0f, 3201);
  const auto v = RoundedRandom(B * H * N * e, -1.0f, 1.0f, 3202);
  const auto dout = RoundedRandom(B * H * N * e, -1.0f, 1.0f, 3203);
  const auto w = Projection(m, d, 3204);
  const cpu::LinearAttentionDims dims{B, H, N, N, m, e};
  cpu::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.feature_map = cpu::FeatureMap::identity;

  // The CPU chain.
  std::vector<float> fq(B * H * N * m), fk(fq.size()), want_out(B * H * N * e), den(B * H * N);
  cpu::favor_forward(g, FavorStabilizer::per_row, q.data(), w.data(), fq.data());
  cpu::favor_forward(g, FavorStabilizer::per_slice, k.data(), w.data(), fk.data());
  fq = Rounded(fq), fk = Rounded(fk);
  std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
  cpu::linear_attention_forward(dims, cfg, fq.data(), fk.data(), v.data(), want_out.data(), den.data(), ws.data(),
                                ws.size());
  want_out = Rounded(want_out);
  std::vector<float> dfq(fq.size()), dfk(fk.size()), dv(v.size()), want_dq(q.size()), want_dk(k.size());
  ws.assign(cpu::linear_attention_backward_workspace_floats(dims, cfg), 0.0f);
  cpu::linear_attention_backward(dims, cfg, fq.data(), fk.data(), v.data(), want_out.data(), den.data(), dout.data(),
                                 dfq.data(), dfk.data(), dv.data(), ws.data(), ws.size());
  dfq = Rounded(dfq), dfk = Rounded(dfk);
  ws.assign(cpu::favor_backward_workspace_floats(g), 0.0f);
  cpu::favor_backward(g, FavorStabilizer::per_row, q.data(), w.data(), fq.data(), dfq.data(), want_dq.data(),
                      ws.data(), ws.size());
  cpu::favor_backward(g, FavorStabilizer::per_slice, k.data(), w.data(), fk.data(), dfk.data(), want_dk.data(),
                      ws.data(), ws.size());

  // The bf16 chain on the target.
  auto d_q = dev(ToBf16(q)), d_k = dev(ToBf16(k)), d_v = dev(ToBf16(v)), d_dout = dev(ToBf16(dout));
  auto d_w = dev(w);
  auto gq = out_bf16(fq.size()), gk = out_bf16(fk.size());
  Forward(g, FavorStabilizer::per_row, d_q.get(), d_w.get(), gq.get());
  Forward(g, FavorStabilizer::per_slice, d_k.get(), d_w.get(), gk.get());
  auto got_out = out_bf16(want_out.size());
  auto got_den = out(den.size());
  {
    const size_t n = TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg);
    auto dws = out(n);
    TARN_ON(target(), linear_attention_bf16_forward, dims, cfg, gq.get(), gk.get(), d_v.get(), got_out.get(),
            got_den.get(), dws.get(), n);
  }
  auto got_dfq = out_bf16(fq.size()), got_dfk = out_bf16(fk.size()), got_dv = out_bf16(v.size());
  {
    const size_t n = TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg);
    auto dws = out(n);
    TARN_ON(target(), linear_attention_bf16_backward, dims, cfg, gq.get(), gk.get(), d_v.get(), got_out.get(),
            got_den.get(), d_dout.get(), got_dfq.get(), got_dfk.get(), got_dv.get(), dws.get(), n);
  }
  auto got_dq = out_bf16(q.size()), got_dk = out_bf16(k.size());
  Backward(g, FavorStabilizer::per_row, d_q.get(), d_w.get(), gq.get(), got_dfq.get(), got_dq.get());
  Backward(g, FavorStabilizer::per_slice, d_k.get(), d_w.get(), gk.get(), got_dfk.get(), got_dk.get());

  auto close = [](const std::vector<float>& got, const std::vector<float>& want, float fraction) {
    return AllClose(got, want, fraction, fraction * MaxAbs(want));
  };
  EXPECT_TRUE(close(ToFloat(got_out.host()), want_out, kChainForward)) << "out";
  EXPECT_TRUE(close(got_den.host(), den, kChainForward)) << "den";
  EXPECT_TRUE(close(ToFloat(got_dq.host()), want_dq, kChainGradient)) << "dq";
  EXPECT_TRUE(close(ToFloat(got_dk.host()), want_dk, kChainGradient)) << "dk";
}

INSTANTIATE_TEST_SUITE_P(AllTargets, FavorBf16Conformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
