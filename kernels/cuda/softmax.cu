// Softmax and log-softmax over the last axis of (rows, cols), forward and backward
// (kernels/softmax.h). One block per row (grid-stride over rows), block reductions for the max
// and the sums; a row is re-read from L1/L2 on each pass.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using device::block_max;
using device::block_sum;

// x, y: (rows, cols). y = exp(x - max) / sum, or x - max - log(sum) when kLog.
template <bool kLog>
__global__ void softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = block_max(m);
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = block_sum(s);
    if (kLog) {
      const float shift = m + logf(s);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] - shift;
    } else {
      const float inv = 1.0f / s;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y)); log-softmax: dx = dy - exp(y) * sum(dy).
template <bool kLog>
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += kLog ? gr[c] : gr[c] * yr[c];
    s = block_sum(s);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      dr[c] = kLog ? gr[c] - expf(yr[c]) * s : yr[c] * (gr[c] - s);
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY)); }

}  // namespace

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(softmax_forward_kernel<false>, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, y, rows,
               cols);
}

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(softmax_forward_kernel<true>, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, x, y, rows,
               cols);
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(softmax_backward_kernel<false>, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, y, dy, dx,
               rows, cols);
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  tarn::launch(softmax_backward_kernel<true>, row_blocks(rows), device::threads_for_row(cols), 0, nullptr, y, dy, dx,
               rows, cols);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
