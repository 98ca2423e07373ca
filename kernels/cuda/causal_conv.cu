// The short causal depthwise convolution on CUDA (kernels/causal_conv.h, kernels/cuda_delta_rule.h):
// y and dx a thread per element (taps reads each, taps <= a few), dw a block per (tap, 32
// channels) whose kRowGroups warps each sum a strided share of the rows, the shares then added
// in a fixed order: the same bits on every run.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_delta_rule.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::CausalConvDims;

constexpr int kChannelsPerBlock = device::kWarp;
constexpr int kRowGroups = 8;

// y[b, t, c] = sum_{i < taps, i <= t} w[i, c] x[b, t - i, c]
__global__ void causal_conv_forward_kernel(CausalConvDims d, const float* x, const float* w, float* y) {
  const int64_t total = d.batch * d.n * d.channels;
  for (int64_t e = device::global_index(); e < total; e += device::global_stride()) {
    const int64_t c = e % d.channels, r = e / d.channels, t = r % d.n;
    float acc = 0.0f;
    for (int64_t i = 0; i < d.taps && i <= t; ++i) acc += w[i * d.channels + c] * x[e - i * d.channels];
    y[e] = acc;
  }
}

// dx[b, t, c] = sum_{i < taps, t + i < n} w[i, c] dy[b, t + i, c]
__global__ void causal_conv_dx_kernel(CausalConvDims d, const float* w, const float* dy, float* dx) {
  const int64_t total = d.batch * d.n * d.channels;
  for (int64_t e = device::global_index(); e < total; e += device::global_stride()) {
    const int64_t c = e % d.channels, r = e / d.channels, t = r % d.n;
    float acc = 0.0f;
    for (int64_t i = 0; i < d.taps && t + i < d.n; ++i) acc += w[i * d.channels + c] * dy[e + i * d.channels];
    dx[e] = acc;
  }
}

// dw[i, c] = sum_{b, t >= i} x[b, t - i, c] dy[b, t, c]: grid (channel tiles, taps), block
// (32 channels, kRowGroups row groups).
__global__ void causal_conv_dw_kernel(CausalConvDims d, const float* x, const float* dy, float* dw) {
  __shared__ float partial[kRowGroups][kChannelsPerBlock];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelsPerBlock + threadIdx.x, i = blockIdx.y;
  const int64_t rows = d.batch * d.n;
  float acc = 0.0f;
  if (c < d.channels)
    for (int64_t r = threadIdx.y; r < rows; r += kRowGroups)
      if (r % d.n >= i) acc += x[(r - i) * d.channels + c] * dy[r * d.channels + c];
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < d.channels) {
    float sum = 0.0f;
    for (int g = 0; g < kRowGroups; ++g) sum += partial[g][threadIdx.x];
    dw[i * d.channels + c] = sum;
  }
}

void check(const CausalConvDims& d) {
  TARN_CHECK(d.batch >= 0 && d.n >= 0 && d.channels > 0 && d.taps >= 1, "causal conv: bad dims batch ", d.batch,
             " n ", d.n, " channels ", d.channels, " taps ", d.taps);
  TARN_CHECK(d.taps <= device::kMaxGridY, "causal conv: ", d.taps, " taps exceed one grid");
}

}  // namespace

void causal_conv_forward(const CausalConvDims& d, const float* x, const float* w, float* y) {
  check(d);
  const int64_t total = d.batch * d.n * d.channels;
  if (total == 0) return;
  tarn::launch(causal_conv_forward_kernel, device::grid_for(total), device::kBlock, 0, nullptr, d, x, w, y);
}

void causal_conv_backward(const CausalConvDims& d, const float* x, const float* w, const float* dy, float* dx,
                          float* dw) {
  check(d);
  const int64_t total = d.batch * d.n * d.channels;
  if (dx != nullptr && total > 0)
    tarn::launch(causal_conv_dx_kernel, device::grid_for(total), device::kBlock, 0, nullptr, d, w, dy, dx);
  if (dw != nullptr) {  // with no rows every dw is 0, which the kernel writes too
    const dim3 grid(static_cast<unsigned>((d.channels + kChannelsPerBlock - 1) / kChannelsPerBlock),
                    static_cast<unsigned>(d.taps));
    tarn::launch(causal_conv_dw_kernel, grid, dim3(kChannelsPerBlock, kRowGroups), 0, nullptr, d, x, dy, dw);
  }
}

}  // namespace tarn::kernels::TARN_CUDA_NS
