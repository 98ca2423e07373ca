#pragma once
// Random fills of f32 buffers from Philox4x32-10, the same numbers on the CPU and on the GPU
// (docs/design.md section 1: one RNG design on both devices).
//
// Layout: cuRAND's device API. curand_init(seed, subsequence, offset, &state) sets
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (offset/4 low, offset/4 high, subsequence low, subsequence high)
// and curand(&state) returns word offset % 4 of Philox4x32-10(counter, key), moving on by one
// word (curand_philox4x32_x.h, curand_kernel.h). framework/rng.h's Philox(seed, stream, offset)
// and kernels/cuda/philox.cuh use exactly this layout with stream = subsequence, so
// "word p of stream (seed, stream)" means the same 32 bits everywhere.
//
// Where tarn and cuRAND agree, bit for bit (tests/cuda/curand_reference_test.cpp checks it
// against cuRAND's own header code compiled for the host):
//   - the raw 32-bit words for every (seed, stream, offset), aligned to a block of 4 or not;
//   - the uniform conversion: u = x * 2^-32 + 2^-33, in (0, 1] (curand_uniform's; the product
//     is exact, so an FMA-contracted device build rounds the same).
// Where they cannot agree, and what tarn does instead:
//   - normals. curand_normal() turns a pair of words (x, y) into TWO normals, r sin(t) and then
//     r cos(t) (cached in the state), with t = y * (2pi 2^-32) + pi 2^-32 and, on the device,
//     the fast __sincosf. framework/rng.h's Philox::normal() (the CPU reference, fixed before
//     this file) gives ONE normal per pair, r sin(t) with t = uniform(y) * 2pi. tarn's fills
//     follow the CPU: normal i uses words 2i and 2i+1 after `offset`, and r = sqrt(-2 log u).
//     The device's logf/sinf/sqrtf (no fast math) differ from glibc's by an ulp or two, so GPU
//     normals match the CPU's to a few ulp, not bit for bit; the emulated build uses glibc and
//     matches bit for bit.
//   - cuRAND's host API (curandCreateGenerator*, CURAND_RNG_PSEUDO_PHILOX4_32_10) interleaves
//     subsequences: its outputs 4t..4t+3 are the first block of subsequence t (checked with
//     curandCreateGeneratorHost, which runs without a GPU). It cannot reproduce one stream of
//     the device layout, so tarn uses the device API (curand_init + curand4 in a kernel).
//   - uniform_fill(low, high) is fmaf(high - low, u, low), one fused operation on every device
//     so that nvcc's contraction cannot make the GPU round differently; it lies in (low, high].
//     (cuRAND's interval, not [low, high): the CPU's Philox::uniform fixed it before this file.)
//
// Offsets: a uniform fill of n values consumes n words; a normal fill consumes 2n
// (normal_fill_words). Continue a stream by passing offset + that many.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/philox.cuh"
#include "kernels/cuda_api.h"

namespace tarn::kernels {

// Where a fill starts: word `offset` of Philox stream (seed, stream).
struct PhiloxPosition {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;
};

// Words of the stream a normal fill of n values consumes (two per value).
inline uint64_t normal_fill_words(int64_t n) { return 2 * static_cast<uint64_t>(n > 0 ? n : 0); }

namespace random_math {

constexpr float kInv2Pow32 = 2.3283064e-10f;  // 2^-32
constexpr float kTwoPi = 6.2831855f;          // float(2 pi), as framework/rng.cpp

// uint32 -> (0, 1], curand_uniform's conversion (and framework/rng.h's uint_to_uniform).
TARN_HOST_DEVICE float to_uniform(uint32_t x) { return static_cast<float>(x) * kInv2Pow32 + kInv2Pow32 / 2.0f; }

// Two words -> one standard normal, as framework/rng.cpp's Philox::normal (Box-Muller, sine
// branch): radius from the first word, angle from the second.
TARN_HOST_DEVICE float to_normal(uint32_t first, uint32_t second) {
  const float u = to_uniform(first);
  const float angle = to_uniform(second) * kTwoPi;
  return sqrtf(-2.0f * logf(u)) * sinf(angle);
}

}  // namespace random_math
}  // namespace tarn::kernels

namespace tarn::kernels::cpu {

// out[i] = low + (high - low) * uniform(word offset + i), i < n: values in (low, high].
void uniform_fill(float* out, int64_t n, float low, float high, const PhiloxPosition& at);
// out[i] = mean + stddev * normal(words offset + 2i, offset + 2i + 1), i < n.
void normal_fill(float* out, int64_t n, float mean, float stddev, const PhiloxPosition& at);

}  // namespace tarn::kernels::cpu

// The CUDA versions (kernels/cuda/random.cu): `out` is device memory, work goes to the
// default stream. tarn::kernels::cuda is nvcc's build (cuRAND's device API draws the words),
// tarn::kernels::cuda_emu the emulated one (kernels/cuda/philox.cuh draws them).
#define TARN_RANDOM_CUDA_API                                                                 \
  void uniform_fill(float* out, int64_t n, float low, float high, const PhiloxPosition& at); \
  void normal_fill(float* out, int64_t n, float mean, float stddev, const PhiloxPosition& at);

TARN_DECLARE_CUDA_API(TARN_RANDOM_CUDA_API)

#undef TARN_RANDOM_CUDA_API
