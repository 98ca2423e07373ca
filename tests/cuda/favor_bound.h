#pragma once
// Per-element error bounds of the FAVOR+ feature map (kernels/feature_maps.h: favor_forward,
// favor_backward), for the conformance tests of the CUDA kernels: each side's running error
// bound (tests/cuda/tolerance.h) of the formula kernels/cpu/feature_maps.cpp and
// kernels/cuda/linear_attention_favor.cu both compute, summed:
//   forward   the projection h = d^(-1/4) x W^T (a d-term GEMM: OpenBLAS, cuBLAS, with tf32
//             operands where TARN_ALLOW_TF32=1 on a GPU), |x'|^2 / 2, t = h - |x'|^2 / 2, the
//             stabiliser's max (off by the largest error of what it maxes over), then
//             exp(t - s) / sqrt(m);
//   backward  dt = dy y with the stabiliser's -sum dt at its argmax, then scale dt W (an m-term
//             GEMM) - scale^2 rowsum(dt) x, from the given y.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/feature_maps.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {

struct FavorBound {
  std::vector<Bounded> y, dx;
};

// One side's values and bounds: y from x, and (unless dy is empty) dx from y_in and dy.
inline FavorBound Favor(const Rounding& side, bool tf32, const kernels::cpu::FavorDims& g,
                        kernels::cpu::FavorStabilizer stab, const std::vector<float>& x, const std::vector<float>& w,
                        const std::vector<float>& y_in, const std::vector<float>& dy) {
  using kernels::cpu::FavorStabilizer;
  const double scale = static_cast<float>(std::pow(double(g.d), -0.25));
  const double half_sq = 0.5f * static_cast<float>(scale) * static_cast<float>(scale);
  const double scale_sq = static_cast<float>(scale) * static_cast<float>(scale);
  const double inv_sqrt_m = 1.0f / std::sqrt(static_cast<float>(g.m));
  // A GEMM product term: tf32 rounds both operands first (2 kTf32 of the product).
  auto product = [&](const Bounded& a, const Bounded& b) {
    Bounded p = a * b;
    if (tf32) p.err += Gamma(2, kTf32) * std::fabs(p.v);
    return p;
  };
  FavorBound out;
  out.y.resize(g.slices * g.rows * g.m);
  out.dx.resize(x.size());
  for (int64_t s = 0; s < g.slices; ++s) {
    Bounded slice_top{-INFINITY, 0.0, &side};
    std::vector<Bounded> t(g.rows * g.m);
    for (int64_t r = 0; r < g.rows; ++r) {
      const float* xr = x.data() + (s * g.rows + r) * g.d;
      std::vector<Bounded> sq(g.d), terms(g.d);
      for (int64_t k = 0; k < g.d; ++k) sq[k] = Exact(side, xr[k]) * Exact(side, xr[k]);
      const Bounded c = half_sq * Sum(sq);
      Bounded row_top{-INFINITY, 0.0, &side};
      for (int64_t j = 0; j < g.m; ++j) {
        for (int64_t k = 0; k < g.d; ++k) terms[k] = product(Exact(side, xr[k]), Exact(side, w[j * g.d + k]));
        Bounded& tj = t[r * g.m + j];
        tj = Sum(terms) * scale - c;
        if (tj.v > row_top.v) row_top.v = tj.v;
        row_top.err = std::max(row_top.err, tj.err);
      }
      if (row_top.v > slice_top.v) slice_top.v = row_top.v;
      slice_top.err = std::max(slice_top.err, row_top.err);
      if (stab == FavorStabilizer::per_slice) continue;
      const Bounded shift = stab == FavorStabilizer::per_row ? row_top : Exact(side, 0.0);
      for (int64_t j = 0; j < g.m; ++j)
        out.y[(s * g.rows + r) * g.m + j] = Exp(t[r * g.m + j] - shift) * inv_sqrt_m;
    }
    if (stab == FavorStabilizer::per_slice)
      for (int64_t j = 0; j < g.rows * g.m; ++j) out.y[s * g.rows * g.m + j] = Exp(t[j] - slice_top) * inv_sqrt_m;
    if (dy.empty()) continue;
    // Backward from the given y.
    const float* ys = y_in.data() + s * g.rows * g.m;
    const float* dys = dy.data() + s * g.rows * g.m;
    std::vector<Bounded> dt(g.rows * g.m);
    for (int64_t j = 0; j < g.rows * g.m; ++j) dt[j] = Exact(side, dys[j]) * Exact(side, ys[j]);
    if (stab == FavorStabilizer::per_slice) {
      const int64_t top = std::max_element(ys, ys + g.rows * g.m) - ys;
      dt[top] = dt[top] - Sum(dt);
    }
    for (int64_t r = 0; r < g.rows; ++r) {
      std::vector<Bounded> row(dt.begin() + r * g.m, dt.begin() + (r + 1) * g.m);
      if (stab == FavorStabilizer::per_row) {
        const int64_t top = std::max_element(ys + r * g.m, ys + (r + 1) * g.m) - (ys + r * g.m);
        row[top] = row[top] - Sum(row);
      }
      const Bounded c = scale_sq * Sum(row);
      const float* xr = x.data() + (s * g.rows + r) * g.d;
      std::vector<Bounded> terms(g.m);
      for (int64_t k = 0; k < g.d; ++k) {
        for (int64_t j = 0; j < g.m; ++j) terms[j] = product(row[j], Exact(side, w[j * g.d + k]));
        out.dx[(s * g.rows + r) * g.d + k] = Sum(terms) * scale - c * xr[k];
      }
    }
  }
  return out;
}

// Both sides' bounds: the device's (tf32 GEMMs where allowed on a GPU) and the CPU's.
inline FavorBound FavorBoth(Target target, const kernels::cpu::FavorDims& g, kernels::cpu::FavorStabilizer stab,
                            const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& y_in,
                            const std::vector<float>& dy) {
  const FavorBound dev = Favor(kCudaF32, target == Target::gpu && Tf32Allowed(), g, stab, x, w, y_in, dy);
  const FavorBound cpu = Favor(kCpuF32, false, g, stab, x, w, y_in, dy);
  FavorBound both = dev;
  for (size_t i = 0; i < both.y.size(); ++i) both.y[i].err += cpu.y[i].err;
  for (size_t i = 0; i < both.dx.size(); ++i) both.dx[i].err += cpu.dx[i].err;
  return both;
}

}  // namespace tarn::cuda_testing
