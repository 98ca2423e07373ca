// Fused layer norm over the last axis of (rows, cols), statistics in f32 (kernels/layer_norm.h).
// Forward and dx: one block per row (mean, then the centred variance). dgamma and dbeta: sums
// over rows in blocks of kRowBlock rows, combined in block order, as the CPU kernel does: no
// atomics, the same result for any launch shape.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int64_t kRowBlock = 64;  // rows per dgamma/dbeta partial sum (the CPU kernel's)

// x, y: (rows, cols); gamma, beta: (cols) or null; mean, rstd: (rows).
__global__ void layer_norm_forward_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                          float* mean, float* rstd, int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const float m = block_sum(s) * inv_cols;
    float v = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v += (xr[c] - m) * (xr[c] - m);
    const float rs = 1.0f / sqrtf(block_sum(v) * inv_cols + eps);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = gamma ? gamma[c] : 1.0f, b = beta ? beta[c] : 0.0f;
      yr[c] = (xr[c] - m) * rs * g + b;
    }
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * gamma, per row.
__global__ void layer_norm_dx_kernel(const float* x, const float* dy, const float* gamma, const float* mean,
                                     const float* rstd, float* dx, int64_t rows, int64_t cols) {
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = gr[c] * (gamma ? gamma[c] : 1.0f);
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    const float mean_g = block_sum(sg) * inv_cols;
    const float mean_gx = block_sum(sgx) * inv_cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = gr[c] * (gamma ? gamma[c] : 1.0f);
      dr[c] = rs * (g - mean_g - (xr[c] - m) * rs * mean_gx);
    }
  }
}

// partial[blk][0][c] = sum over the block's rows of dy * xhat, partial[blk][1][c] = of dy.
// x over columns, y over row blocks.
__global__ void layer_norm_param_partial_kernel(const float* x, const float* dy, const float* mean, const float* rstd,
                                                float* partial, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t blk = blockIdx.y; blk * kRowBlock < rows; blk += gridDim.y) {
    const int64_t r1 = (blk + 1) * kRowBlock < rows ? (blk + 1) * kRowBlock : rows;
    float pg = 0.0f, pb = 0.0f;
    for (int64_t r = blk * kRowBlock; r < r1; ++r) {
      const float g = dy[r * cols + c];
      pg += g * (x[r * cols + c] - mean[r]) * rstd[r];
      pb += g;
    }
    partial[(blk * 2) * cols + c] = pg;
    partial[(blk * 2 + 1) * cols + c] = pb;
  }
}

__global__ void layer_norm_param_total_kernel(const float* partial, float* dgamma, float* dbeta, int64_t blocks,
                                              int64_t cols) {
  for (int64_t c = global_index(); c < cols; c += global_stride()) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      sg += partial[(b * 2) * cols + c];
      sb += partial[(b * 2 + 1) * cols + c];
    }
    if (dgamma) dgamma[c] = sg;
    if (dbeta) dbeta[c] = sb;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY)); }

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(layer_norm_forward_kernel, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, gamma, beta,
               y, mean, rstd, rows, cols, eps);
}

void layer_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  if (cols <= 0) return;
  if (dx && rows > 0)
    tarn::launch(layer_norm_dx_kernel, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, dy, gamma, mean,
                 rstd, dx, rows, cols);
  if (!dgamma && !dbeta) return;
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  Scratch<float> partial(blocks * 2 * cols);
  if (rows > 0) {
    const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock),
                    static_cast<unsigned>(std::min<int64_t>(blocks, device::kMaxGridY)));
    tarn::launch(layer_norm_param_partial_kernel, grid, kBlock, 0, nullptr, x, dy, mean, rstd, partial.get(), rows,
                 cols);
  } else {
    TARN_CUDA_CALL(cudaMemsetAsync(partial.get(), 0, static_cast<size_t>(2 * cols) * sizeof(float), nullptr));
  }
  tarn::launch(layer_norm_param_total_kernel, grid_for(cols), kBlock, 0, nullptr,
               static_cast<const float*>(partial.get()), dgamma, dbeta, blocks, cols);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
