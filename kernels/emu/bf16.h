#pragma once
// bfloat16 as plain C++: the storage type of the bf16 kernels' buffers (kernels/cuda_linear_attention_bf16.h)
// on the host and, under the CUDA emulator, on the "device". 16 bits: the top half of an IEEE f32
// (sign, 8 exponent bits, 7 mantissa bits), so widening to float is a shift and narrowing rounds
// the low 16 bits away to nearest, ties to even, as __float2bfloat16_rn does on the GPU. Every
// NaN, whatever its sign and payload, becomes the canonical bf16 NaN 0x7FFF: what the GPU's
// cvt.rn.bf16.f32 gives and what CUDA's own host fallback (cuda_bf16.hpp) returns, so that the
// CPU, the emulator and the hardware agree bit for bit.
// Layout-compatible with CUDA's __nv_bfloat16 (one uint16_t): nvcc-built kernels reinterpret a
// tarn::bf16 buffer as __nv_bfloat16. No CUDA dependency: host code and tests include it freely.
#include <cstdint>
#include <cstring>

namespace tarn {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 16 bits, as __nv_bfloat16");

constexpr uint16_t kBf16CanonicalNan = 0x7fff;

// Round to nearest even. Any NaN becomes kBf16CanonicalNan; values past the largest bf16 round
// to inf.
inline bf16 bf16_from_float(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{kBf16CanonicalNan};
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline float bf16_to_float(bf16 h) {
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// x rounded to the nearest bf16, as a float (what a bf16 round trip keeps).
inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

}  // namespace tarn
