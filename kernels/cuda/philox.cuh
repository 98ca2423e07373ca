#pragma once
// Philox4x32-10 (Salmon et al., SC'11) for host and device code, laid out as framework/rng.h
// and cuRAND (key = seed, counter = (block, stream)): output i of stream (seed, stream) is word
// i % 4 of the bijection applied to block i / 4, so a kernel thread can draw any element on
// its own and get the bits that tarn::philox_at(seed, stream, i) gives on the CPU.
// tests/cuda/conformance_optim_test.cpp checks the two against each other, and
// tests/cuda/curand_reference_test.cpp both against cuRAND's own Philox.
#include <cstdint>

#include "kernels/host_device.h"

namespace tarn::philox {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
constexpr int kRounds = 10;

struct Words {
  uint32_t w[4];
};

TARN_HOST_DEVICE uint32_t mul_hi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// The four outputs of block `block` of stream (seed, stream).
TARN_HOST_DEVICE Words block(uint64_t seed, uint64_t stream, uint64_t block) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < kRounds; ++round) {
    const uint32_t hi0 = mul_hi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = mul_hi(kMul1, c2), lo1 = kMul1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Words{{c0, c1, c2, c3}};
}

// Output `index` of stream (seed, stream): tarn::philox_at.
TARN_HOST_DEVICE uint32_t at(uint64_t seed, uint64_t stream, uint64_t index) {
  return block(seed, stream, index / 4).w[index % 4];
}

}  // namespace tarn::philox
