// RMS normalisation over the last axis of (rows, cols) on CUDA (kernels/rms_norm.h). Forward and
// dx: a block per row. dgamma: sums over blocks of kRowBlock rows, combined in block order as the
// CPU kernel does: no atomics, the same result for any launch shape.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int64_t kRowBlock = 64;

__global__ void rms_norm_forward_kernel(const float* x, const float* gamma, float* y, float* rstd, int64_t rows,
                                        int64_t cols, float divisor, float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    const float rs = 1.0f / sqrtf(block_sum(ss) / divisor + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * rs * (gamma ? gamma[c] : 1.0f);
  }
}

// dx = rstd g - x rstd^3 (sum g x) / divisor with g = dy gamma, per row.
__global__ void rms_norm_dx_kernel(const float* x, const float* dy, const float* gamma, const float* rstd, float* dx,
                                   int64_t rows, int64_t cols, float divisor) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    const float rs = rstd[r];
    float sgx = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sgx += gr[c] * (gamma ? gamma[c] : 1.0f) * xr[c];
    const float k = rs * rs * rs * block_sum(sgx) / divisor;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dr[c] = rs * gr[c] * (gamma ? gamma[c] : 1.0f) - xr[c] * k;
  }
}

// partial[blk][c] = sum over the block's rows of dy x rstd; x over columns, y over row blocks.
__global__ void rms_norm_dgamma_partial_kernel(const float* x, const float* dy, const float* rstd, float* partial,
                                               int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t blk = blockIdx.y; blk * kRowBlock < rows; blk += gridDim.y) {
    const int64_t r1 = (blk + 1) * kRowBlock < rows ? (blk + 1) * kRowBlock : rows;
    float p = 0.0f;
    for (int64_t r = blk * kRowBlock; r < r1; ++r) p += dy[r * cols + c] * x[r * cols + c] * rstd[r];
    partial[blk * cols + c] = p;
  }
}

__global__ void rms_norm_dgamma_total_kernel(const float* partial, float* dgamma, int64_t blocks, int64_t cols) {
  for (int64_t c = global_index(); c < cols; c += global_stride()) {
    float s = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) s += partial[b * cols + c];
    dgamma[c] = s;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY)); }

}  // namespace

void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t cols,
                      float divisor, float eps) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(rms_norm_forward_kernel, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, gamma, y, rstd,
               rows, cols, divisor, eps);
}

void rms_norm_backward(const float* x, const float* dy, const float* gamma, const float* rstd, float* dx,
                       float* dgamma, int64_t rows, int64_t cols, float divisor) {
  if (cols <= 0) return;
  if (dx && rows > 0)
    tarn::launch(rms_norm_dx_kernel, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, dy, gamma, rstd,
                 dx, rows, cols, divisor);
  if (!dgamma) return;
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowBlock - 1) / kRowBlock);
  Scratch<float> partial(blocks * cols);
  if (rows > 0) {
    const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock),
                    static_cast<unsigned>(std::min<int64_t>(blocks, device::kMaxGridY)));
    tarn::launch(rms_norm_dgamma_partial_kernel, grid, kBlock, 0, nullptr, x, dy, rstd, partial.get(), rows, cols);
  } else {
    TARN_CUDA_CALL(cudaMemsetAsync(partial.get(), 0, static_cast<size_t>(cols) * sizeof(float), nullptr));
  }
  tarn::launch(rms_norm_dgamma_total_kernel, grid_for(cols), kBlock, 0, nullptr, static_cast<const float*>(partial.get()),
               dgamma, blocks, cols);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
