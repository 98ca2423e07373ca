#include "kernels/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

constexpr int64_t kRowBlock = 64;  // rows per dgamma partial sum (kernels/layer_norm.h's blocking)

// The row's rstd = 1 / sqrt(sum x^2 / divisor + eps), the sum in double.
inline float row_rstd(const float* xr, int64_t cols, float divisor, float eps) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
  return 1.0f / std::sqrt(static_cast<float>(ss) / divisor + eps);
}

}  // namespace

void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t cols,
                      float divisor, float eps) {
  std::vector<float> ones(gamma ? 0 : cols, 1.0f);
  const float* gam = gamma ? gamma : ones.data();
#pragma omp parallel for if (rows * cols > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float rs = row_rstd(xr, cols, divisor, eps);
    rstd[r] = rs;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * gam[c];
  }
}

void rms_norm_backward(const float* x, const float* dy, const float* gamma, const float* rstd, float* dx,
                       float* dgamma, int64_t rows, int64_t cols, float divisor) {
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  std::vector<float> partial(dgamma ? static_cast<size_t>(blocks * cols) : 0, 0.0f);  // per block: dgamma's
  std::vector<float> ones(gamma ? 0 : cols, 1.0f);
  const float* gam = gamma ? gamma : ones.data();
  const bool parallel = rows * cols > kParallelGrain;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    float* pg = dgamma ? partial.data() + b * cols : nullptr;
    for (int64_t r = b * kRowBlock; r < std::min(rows, (b + 1) * kRowBlock); ++r) {
      const float* xr = x + r * cols;
      const float* gr = dy + r * cols;
      const float rs = rstd[r];
      if (pg != nullptr) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) pg[c] += gr[c] * xr[c] * rs;
      }
      if (dx == nullptr) continue;
      double sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t c = 0; c < cols; ++c) sum_gx += gr[c] * gam[c] * xr[c];
      const float k = rs * rs * rs * static_cast<float>(sum_gx) / divisor;
      float* dr = dx + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) dr[c] = rs * gr[c] * gam[c] - xr[c] * k;
    }
  }
  if (dgamma == nullptr) return;
  std::fill(dgamma, dgamma + cols, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {  // block order: the same sum for any thread count
    const float* pg = partial.data() + b * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dgamma[c] += pg[c];
  }
}

}  // namespace tarn::kernels::cpu
