#include "kernels/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/softmax_row.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

// dgamma/dbeta partial sums cover blocks of this many rows: enough tasks for every thread on
// transformer shapes (8192 rows -> 128 blocks) with partials 1/32 the size of dy.
constexpr int64_t kRowBlock = 64;
// Columns per task when the block partials are combined (1 KiB of each partial row).
constexpr int64_t kColTile = 256;

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // No affine parameters: scale 1 and shift 0, so that one vectorised loop serves every case.
  std::vector<float> ones(gamma ? 0 : cols, 1.0f), zeros(beta ? 0 : cols, 0.0f);
  const float* gam = gamma ? gamma : ones.data();
  const float* bet = beta ? beta : zeros.data();
#pragma omp parallel for if (rows * cols > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float m = row::sum(xr, cols) * inv_cols;
    double var = 0.0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - m) * (xr[c] - m);
    const float rs = 1.0f / std::sqrt(static_cast<float>(var) * inv_cols + eps);
    mean[r] = m;
    rstd[r] = rs;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rs * gam[c] + bet[c];
  }
}

void layer_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  const bool want_params = dgamma || dbeta;
  // Per block: [dgamma partial (cols) | dbeta partial (cols)].
  std::vector<float> partial(want_params ? static_cast<size_t>(blocks * 2 * cols) : 0, 0.0f);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const bool parallel = rows * cols > kParallelGrain;
  std::vector<float> ones(gamma ? 0 : cols, 1.0f);
  const float* gam = gamma ? gamma : ones.data();

#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    float* pg = want_params ? partial.data() + b * 2 * cols : nullptr;
    float* pb = want_params ? pg + cols : nullptr;
    for (int64_t r = b * kRowBlock; r < std::min(rows, (b + 1) * kRowBlock); ++r) {
      const float* xr = x + r * cols;
      const float* gr = dy + r * cols;
      const float m = mean[r], rs = rstd[r];
      if (want_params) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
          pg[c] += gr[c] * (xr[c] - m) * rs;
          pb[c] += gr[c];
        }
      }
      if (!dx) continue;
      double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t c = 0; c < cols; ++c) {
        const float g = gr[c] * gam[c];
        sum_g += g;
        sum_gx += g * (xr[c] - m) * rs;
      }
      const float mean_g = static_cast<float>(sum_g) * inv_cols, mean_gx = static_cast<float>(sum_gx) * inv_cols;
      float* dr = dx + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float g = gr[c] * gam[c];
        dr[c] = rs * (g - mean_g - (xr[c] - m) * rs * mean_gx);
      }
    }
  }
  if (!want_params) return;

  // Combine block partials in block order, parallel over column tiles.
  const int64_t tiles = (cols + kColTile - 1) / kColTile;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t c0 = t * kColTile, len = std::min(kColTile, cols - c0);
    float sg[kColTile], sb[kColTile];
    std::fill(sg, sg + len, 0.0f);
    std::fill(sb, sb + len, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* pg = partial.data() + b * 2 * cols + c0;
      const float* pb = pg + cols;
#pragma omp simd
      for (int64_t c = 0; c < len; ++c) {
        sg[c] += pg[c];
        sb[c] += pb[c];
      }
    }
    if (dgamma) std::copy(sg, sg + len, dgamma + c0);
    if (dbeta) std::copy(sb, sb + len, dbeta + c0);
  }
}

}  // namespace tarn::kernels::cpu
