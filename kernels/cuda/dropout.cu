// Inverted dropout whose mask is a pure function of (seed, stream, element index)
// (kernels/dropout.h): element i is kept iff Philox output i of stream (seed, stream) is >=
// round(p * 2^32). Each thread draws one Philox block, i.e. four consecutive elements, so the
// mask is the CPU's bit for bit. Nothing is stored: the backward regenerates the same mask.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/dropout.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int kWords = 4;  // outputs per Philox block

// x, y: (n). Thread j handles elements [4 j, 4 j + 4).
__global__ void dropout_kernel(const float* x, float* y, int64_t n, uint32_t threshold, float scale, uint64_t seed,
                               uint64_t stream) {
  const int64_t blocks = (n + kWords - 1) / kWords;
  for (int64_t j = global_index(); j < blocks; j += global_stride()) {
    const philox::Words r = philox::block(seed, stream, static_cast<uint64_t>(j));
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      const int64_t i = j * kWords + w;
      // x * 0 for a dropped element, as the CPU kernel: -0 for negative x, NaN stays NaN.
      if (i < n) y[i] = x[i] * (r.w[w] >= threshold ? scale : 0.0f);
    }
  }
}

__global__ void zero_kernel(float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = 0.0f;
}

}  // namespace

void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream) {
  if (n <= 0) return;
  const uint64_t threshold = cpu::dropout_threshold(p);
  if (threshold > UINT32_MAX) {  // p == 1: everything dropped
    tarn::launch(zero_kernel, grid_for(n), kBlock, 0, nullptr, y, n);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  const int64_t blocks = (n + kWords - 1) / kWords;
  tarn::launch(dropout_kernel, grid_for(blocks), kBlock, 0, nullptr, x, y, n, static_cast<uint32_t>(threshold), scale,
               seed, stream);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
