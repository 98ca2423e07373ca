#pragma once
// Root-mean-square normalisation over the last axis of (rows, cols), without centring:
//
//   y = x rstd gamma,   rstd = 1 / sqrt(sum_c x_c^2 / divisor + eps)   (per row)
//
// divisor = cols is RMSNorm (delta attention's per-head output norm); divisor = 1 scales rows to
// unit length (its q and k: x / sqrt(|x|^2 + eps)). One pass forward and one backward instead of
// the five to eight elementwise ops they were composed of. The square sum accumulates in double.
// Parallel over rows; dgamma sums over rows in fixed blocks combined in order, so it is the same
// for any thread count (as kernels/layer_norm.h).
#include <cstdint>

namespace tarn::kernels::cpu {

// x, y: (rows, cols); gamma: (cols) or null (1). Writes rstd (rows) for the backward.
void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t cols,
                      float divisor, float eps);

// With g = dy gamma, per row:
//   dx = rstd g - x rstd^3 (sum_c g_c x_c) / divisor,   dgamma = sum_rows dy x rstd.
// dx and dgamma may each be null when not wanted; gamma may be null (= 1).
void rms_norm_backward(const float* x, const float* dy, const float* gamma, const float* rstd, float* dx,
                       float* dgamma, int64_t rows, int64_t cols, float divisor);

}  // namespace tarn::kernels::cpu
