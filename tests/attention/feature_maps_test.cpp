// Feature-map kernels: forward and backward against double references, finite differences,
// large inputs, and the FAVOR+ projection and estimator.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/rng.h"
#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"
#include "tests/attention/reference.h"

namespace tarn::attention_test {
namespace {

namespace k = kernels::cpu;
using k::FavorDims;
using k::FavorStabilizer;

constexpr double kTolerance = 1e-5;

class RowLocalMap : public ::testing::TestWithParam<FeatureMap> {};

TEST_P(RowLocalMap, ForwardAndBackwardMatchDoubleReference) {
  const FeatureMap map = GetParam();
  for (int64_t d : {1, 16, 37, 64}) {  // widths below, at and off the SIMD width
    const int64_t rows = 150;
    const Floats x = normal_floats(rows * d, 7, 2.0f), dy = normal_floats(rows * d, 8);
    Floats y(x.size()), dx(x.size());
    k::feature_map_forward(map, rows, d, x.data(), y.data());
    k::feature_map_backward(map, rows, d, x.data(), dy.data(), dx.data());
    const Doubles ddy(dy.begin(), dy.end());
    EXPECT_LE(relative_error(y, phi_rows(map, x, d)), kTolerance) << "d " << d;
    EXPECT_LE(relative_error(dx, phi_rows_backward(map, x, d, ddy)), kTolerance) << "d " << d;
  }
}

TEST_P(RowLocalMap, BackwardMatchesFiniteDifferencesOfForward) {
  const FeatureMap map = GetParam();
  const int64_t rows = 3, d = 5;
  Floats x = normal_floats(rows * d, 9);
  for (auto& v : x) v += v > 0 ? 0.05f : -0.05f;  // keep relu's kink out of the stencil
  const Floats dy = normal_floats(rows * d, 10);
  Floats dx(x.size());
  k::feature_map_backward(map, rows, d, x.data(), dy.data(), dx.data());
  constexpr float h = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    Floats xp = x, xm = x, yp(x.size()), ym(x.size());
    xp[i] += h, xm[i] -= h;
    k::feature_map_forward(map, rows, d, xp.data(), yp.data());
    k::feature_map_forward(map, rows, d, xm.data(), ym.data());
    double fd = 0.0;
    for (size_t j = 0; j < x.size(); ++j) fd += (double(yp[j]) - ym[j]) / (2 * h) * dy[j];
    EXPECT_NEAR(dx[i], fd, 2e-3 * (1.0 + std::abs(fd))) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, RowLocalMap,
                         ::testing::Values(FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp,
                                           FeatureMap::identity),
                         [](const auto& info) { return k::feature_map_name(info.param); });

TEST(FeatureMaps, ExpOfLargeInputsIsFiniteAndPeaksAtOne) {
  const int64_t rows = 20, d = 64;
  const Floats x = normal_floats(rows * d, 11, 1e4f);
  const Floats dy = normal_floats(rows * d, 12);
  Floats y(x.size()), dx(x.size());
  k::feature_map_forward(FeatureMap::exp, rows, d, x.data(), y.data());
  k::feature_map_backward(FeatureMap::exp, rows, d, x.data(), dy.data(), dx.data());
  EXPECT_TRUE(all_finite(y) && all_finite(dx));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(*std::max_element(y.begin() + r * d, y.begin() + (r + 1) * d), 1.0f);
}

// ---- FAVOR+ ----

Floats draw_projection(int64_t m, int64_t d, uint64_t seed) {
  Philox rng(seed);
  Floats normals(k::favor_projection_normal_count(m, d)), w(m * d);
  for (auto& v : normals) v = rng.normal();
  k::favor_projection_from_normals(m, d, normals.data(), w.data());
  return w;
}

// phi in double from the definition, with the stabiliser of `stab`.
Doubles favor_reference(const FavorDims& g, FavorStabilizer stab, const Floats& x,
                        const Floats& w) {
  const double scale = std::pow(double(g.d), -0.25);
  Doubles t(g.slices * g.rows * g.m);
  for (int64_t r = 0; r < g.slices * g.rows; ++r) {
    double sq = 0.0;
    for (int64_t kk = 0; kk < g.d; ++kk) sq += std::pow(scale * x[r * g.d + kk], 2);
    for (int64_t j = 0; j < g.m; ++j) {
      double h = 0.0;
      for (int64_t kk = 0; kk < g.d; ++kk) h += double(w[j * g.d + kk]) * scale * x[r * g.d + kk];
      t[r * g.m + j] = h - sq / 2;
    }
  }
  Doubles y(t.size());
  for (int64_t s = 0; s < g.slices; ++s) {
    double slice_max = -INFINITY;
    for (int64_t i = s * g.rows * g.m; i < (s + 1) * g.rows * g.m; ++i)
      slice_max = std::max(slice_max, t[i]);
    for (int64_t r = s * g.rows; r < (s + 1) * g.rows; ++r) {
      double shift = 0.0;
      if (stab == FavorStabilizer::per_slice) shift = slice_max;
      if (stab == FavorStabilizer::per_row)
        shift = *std::max_element(t.begin() + r * g.m, t.begin() + (r + 1) * g.m);
      for (int64_t j = 0; j < g.m; ++j)
        y[r * g.m + j] = std::exp(t[r * g.m + j] - shift) / std::sqrt(double(g.m));
    }
  }
  return y;
}

class Favor : public ::testing::TestWithParam<FavorStabilizer> {};

TEST_P(Favor, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const FavorStabilizer stab = GetParam();
  const FavorDims g{2, 7, 8, 24};
  const Floats w = draw_projection(g.m, g.d, 3);
  const Floats x = normal_floats(g.slices * g.rows * g.d, 13, 0.7f);
  const Floats dy = normal_floats(g.slices * g.rows * g.m, 14);
  Floats y(dy.size()), dx(x.size());
  k::favor_forward(g, stab, x.data(), w.data(), y.data());
  EXPECT_LE(relative_error(y, favor_reference(g, stab, x, w)), kTolerance);
  Floats ws(k::favor_backward_workspace_floats(g));
  k::favor_backward(g, stab, x.data(), w.data(), y.data(), dy.data(), dx.data(), ws.data(),
                    ws.size());
  // Central differences of the double reference (the stabiliser's argmax is differentiated
  // through, so the kernel's gradient is the exact derivative of what it computes).
  constexpr double h = 1e-5;
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    Floats xp = x, xm = x;
    xp[i] += float(h), xm[i] -= float(h);
    const double step = double(xp[i]) - double(xm[i]);
    const Doubles yp = favor_reference(g, stab, xp, w), ym = favor_reference(g, stab, xm, w);
    double fd = 0.0;
    for (size_t j = 0; j < yp.size(); ++j) fd += (yp[j] - ym[j]) / step * dy[j];
    err = std::max(err, std::abs(dx[i] - fd));
    scale = std::max(scale, std::abs(fd));
  }
  EXPECT_LE(err / scale, 1e-3);  // finite differences of f32 inputs: ~1e-5 step, 1e-3 slack
}

std::string stabilizer_name(const ::testing::TestParamInfo<FavorStabilizer>& info) {
  switch (info.param) {
    case FavorStabilizer::none: return "none";
    case FavorStabilizer::per_row: return "per_row";
    case FavorStabilizer::per_slice: return "per_slice";
  }
  return "unknown";
}

INSTANTIATE_TEST_SUITE_P(Kernels, Favor,
                         ::testing::Values(FavorStabilizer::none, FavorStabilizer::per_row,
                                           FavorStabilizer::per_slice),
                         stabilizer_name);

TEST(FavorProjection, RowsOfABlockAreOrthogonalWithGaussianNorms) {
  const int64_t m = 40, d = 16;
  const Floats w = draw_projection(m, d, 5);
  double norm_sq_sum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    double nn = 0.0;
    for (int64_t kk = 0; kk < d; ++kk) nn += double(w[i * d + kk]) * w[i * d + kk];
    norm_sq_sum += nn;
    for (int64_t j = (i / d) * d; j < i; ++j) {  // earlier rows of the same block
      double dot = 0.0;
      for (int64_t kk = 0; kk < d; ++kk) dot += double(w[i * d + kk]) * w[j * d + kk];
      EXPECT_NEAR(dot, 0.0, 1e-4) << "rows " << i << ", " << j;
    }
  }
  // E|w|^2 = d for a Gaussian row; 40 rows of chi^2_16 have sd sqrt(2 * 16 / 40) ~ 0.9.
  EXPECT_NEAR(norm_sq_sum / m, double(d), 4.0);
  EXPECT_EQ(draw_projection(m, d, 5), w) << "the same seed must give the same projection";
  EXPECT_NE(draw_projection(m, d, 6), w);
}

TEST(FavorProjection, MeanKernelEstimateOverFreshDrawsApproximatesSoftmaxKernel) {
  // E[phi(q) . phi(k)] = exp(q . k / sqrt(d)) without a stabiliser. Average over fresh
  // projections and compare with the exact kernel within 4 standard errors (and 5%).
  const int64_t m = 256, d = 16, draws = 100;
  const Floats q = normal_floats(d, 17, 0.6f), kk = normal_floats(d, 18, 0.6f);
  double qk = 0.0;
  for (int64_t i = 0; i < d; ++i) qk += double(q[i]) * kk[i];
  const double exact = std::exp(qk / std::sqrt(double(d)));
  double sum = 0.0, sum_sq = 0.0;
  const FavorDims g{1, 1, d, m};
  Floats fq(m), fk(m);
  for (int64_t t = 0; t < draws; ++t) {
    const Floats w = draw_projection(m, d, 1000 + t);
    k::favor_forward(g, FavorStabilizer::none, q.data(), w.data(), fq.data());
    k::favor_forward(g, FavorStabilizer::none, kk.data(), w.data(), fk.data());
    double est = 0.0;
    for (int64_t j = 0; j < m; ++j) est += double(fq[j]) * fk[j];
    sum += est, sum_sq += est * est;
  }
  const double mean = sum / draws;
  const double sem = std::sqrt(std::max(0.0, sum_sq / draws - mean * mean) / draws);
  EXPECT_LE(std::abs(mean - exact), 4 * sem + 1e-9) << "mean " << mean << " exact " << exact;
  EXPECT_LE(std::abs(mean - exact), 0.05 * exact) << "mean " << mean << " exact " << exact;
}

// Large inputs: without the stabiliser exp(w.x - |x|^2/2) overflows or underflows whole rows.
// Where f32 can still resolve the exponents (magnitude 30), the features and the attention
// built on them must agree with the double reference. Beyond it (1e3, 1e5: |x|^2/2 carries
// f32 rounding larger than the spread of the exponents) no f32 kernel can match the reference;
// there the results must stay what attention is: finite, and each output a weighted mean of
// the values (|out| <= max |v|).
TEST(FavorProjection, LargeMagnitudeInputsMatchTheReferenceOrStayWeightedMeans) {
  const int64_t B = 1, H = 2, N = 50, d = 32, e = 16, m = 64;
  const FavorDims g{B * H, N, d, m};
  const Floats w = draw_projection(m, d, 7);
  for (float magnitude : {30.0f, 1e3f, 1e5f}) {
    SCOPED_TRACE("magnitude " + std::to_string(magnitude));
    const bool resolvable = magnitude <= 30.0f;
    const Floats q = normal_floats(B * H * N * d, 19, magnitude);
    const Floats kk = normal_floats(B * H * N * d, 20, magnitude);
    const Floats v = normal_floats(B * H * N * e, 21), dout = normal_floats(B * H * N * e, 22);
    Floats a(B * H * N * m), b(a.size());
    k::favor_forward(g, FavorStabilizer::per_row, q.data(), w.data(), a.data());
    k::favor_forward(g, FavorStabilizer::per_slice, kk.data(), w.data(), b.data());
    EXPECT_TRUE(all_finite(a) && all_finite(b));
    const Doubles a_ref = favor_reference(g, FavorStabilizer::per_row, q, w);
    const Doubles b_ref = favor_reference(g, FavorStabilizer::per_slice, kk, w);
    if (resolvable) {
      EXPECT_LE(relative_error(a, a_ref), 1e-4);
      EXPECT_LE(relative_error(b, b_ref), 1e-4);
    }
    double v_max = 0.0;
    for (float x : v) v_max = std::max(v_max, double(std::abs(x)));
    for (bool causal : {true, false}) {
      SCOPED_TRACE(causal ? "causal" : "bidirectional");
      const k::LinearAttentionDims dims{B, H, N, N, m, e};
      k::LinearAttentionConfig cfg;
      cfg.causal = causal;
      Floats out(v.size()), den(B * H * N), da(a.size()), db(b.size()), dv(v.size());
      Floats ws(k::linear_attention_backward_workspace_floats(dims, cfg));
      k::linear_attention_forward(dims, cfg, a.data(), b.data(), v.data(), out.data(),
                                  den.data(), ws.data(), ws.size());
      k::linear_attention_backward(dims, cfg, a.data(), b.data(), v.data(), out.data(),
                                   den.data(), dout.data(), da.data(), db.data(), dv.data(),
                                   ws.data(), ws.size());
      Floats dq(q.size()), dk(kk.size()), fws(k::favor_backward_workspace_floats(g));
      k::favor_backward(g, FavorStabilizer::per_row, q.data(), w.data(), a.data(), da.data(),
                        dq.data(), fws.data(), fws.size());
      k::favor_backward(g, FavorStabilizer::per_slice, kk.data(), w.data(), b.data(), db.data(),
                        dk.data(), fws.data(), fws.size());
      EXPECT_TRUE(all_finite(out) && all_finite(dq) && all_finite(dk) && all_finite(dv));
      for (float x : out) ASSERT_LE(std::abs(x), v_max * (1 + 1e-5));
      if (resolvable) {
        const LinearShape s{B, H, N, N, m, e};
        const LinearRef ref = linear_reference(s, causal, nullptr, k::kDefaultLinearAttentionEps, a_ref, b_ref, v, dout);
        EXPECT_LE(relative_error(out, ref.out), 1e-4);
        EXPECT_LE(relative_error(dv, ref.dv), 1e-4);
      }
    }
  }
}

}  // namespace
}  // namespace tarn::attention_test
