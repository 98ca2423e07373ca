#pragma once
// Conversions between f32 and bf16 buffers (kernels/emu/bf16.h): the casts of mixed-precision
// training, on either side of the bf16 GEMMs (kernels/gemm.h). Narrowing rounds to nearest,
// ties to even (every NaN becomes the canonical 0x7FFF, past the largest bf16 becomes inf), as
// __float2bfloat16_rn does on the GPU; widening is exact.
#include <cstdint>

#include "kernels/emu/bf16.h"

namespace tarn::kernels::cpu {

void cast_to_bf16(const float* x, bf16* y, int64_t n);
void cast_from_bf16(const bf16* x, float* y, int64_t n);

}  // namespace tarn::kernels::cpu
