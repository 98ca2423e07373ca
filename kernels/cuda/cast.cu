// f32 <-> bf16 conversions on the GPU (kernels/cast.h): grid-stride loops, one read and one
// write per element; the rounding is __float2bfloat16_rn's (mma::to_bf16), as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

__global__ void cast_to_bf16_kernel(const float* x, mma::bf16* y, int64_t n) {
  for (int64_t i = device::global_index(); i < n; i += device::global_stride()) y[i] = mma::to_bf16(x[i]);
}

__global__ void cast_from_bf16_kernel(const mma::bf16* x, float* y, int64_t n) {
  for (int64_t i = device::global_index(); i < n; i += device::global_stride()) y[i] = mma::to_float(x[i]);
}

}  // namespace

// tarn::bf16 and the device's bf16 share one 16-bit layout (kernels/emu/bf16.h).
void cast_to_bf16(const float* x, ::tarn::bf16* y, int64_t n) {
  if (n > 0)
    tarn::launch(cast_to_bf16_kernel, device::grid_for(n), device::kBlock, 0, nullptr, x,
                 reinterpret_cast<mma::bf16*>(y), n);
}

void cast_from_bf16(const ::tarn::bf16* x, float* y, int64_t n) {
  if (n > 0)
    tarn::launch(cast_from_bf16_kernel, device::grid_for(n), device::kBlock, 0, nullptr,
                 reinterpret_cast<const mma::bf16*>(x), y, n);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
