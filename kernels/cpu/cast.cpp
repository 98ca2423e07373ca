#include "kernels/cast.h"

#include <cstring>

#include "kernels/cpu/elementwise_parallel.h"

namespace tarn::kernels::cpu {

// The rounding of bf16_from_float on integer lanes, written without branches so that the loop
// vectorises (any NaN becomes the canonical 0x7FFF, as bf16_from_float and the GPU give).
void cast_to_bf16(const float* x, bf16* y, int64_t n) {
  parallel_chunks(n, [&](int64_t begin, int64_t end) {
    uint16_t* out = reinterpret_cast<uint16_t*>(y);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, 4);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? uint32_t{kBf16CanonicalNan} : rounded);
    }
  });
}

void cast_from_bf16(const bf16* x, float* y, int64_t n) {
  parallel_chunks(n, [&](int64_t begin, int64_t end) {
    const uint16_t* in = reinterpret_cast<const uint16_t*>(x);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t u = static_cast<uint32_t>(in[i]) << 16;
      std::memcpy(y + i, &u, 4);
    }
  });
}

}  // namespace tarn::kernels::cpu
