#pragma once
// Fused layer norm over the last axis of (rows, cols), statistics kept in f32 and accumulated in
// double (two passes over a row that sits in cache: mean, then the centred variance, which does
// not cancel the way E[x^2] - E[x]^2 does). Parallel over rows. The backward reduces dgamma and
// dbeta over rows in fixed blocks combined in order, so they are identical for any thread count.
#include <cstdint>

namespace tarn::kernels::cpu {

// x, y: (rows, cols); gamma, beta: (cols), either may be null (scale 1, shift 0).
// Writes mean and rstd = 1 / sqrt(var + eps) (rows each) for the backward.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t cols, float eps);

// With xhat = (x - mean) rstd and g = dy * gamma (per row, mean over cols):
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dgamma = sum_rows dy xhat,  dbeta = sum_rows dy.
// dx, dgamma, dbeta may each be null when not wanted; gamma may be null (= 1).
void layer_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols);

}  // namespace tarn::kernels::cpu
