// tarn's Philox against cuRAND's own code, with no GPU: curand_kernel.h's device API is plain
// C++ that g++ compiles for the host (QUALIFIERS below), and curandCreateGeneratorHost runs the
// host API on the CPU. Checks the agreements and the one layout difference documented in
// kernels/random.h. This file must not see kernels/emu/emu.h (its uint4, cudaStream_t... would
// clash with the real runtime header's).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "framework/rng.h"
#include "kernels/cuda/philox.cuh"
#include "kernels/random.h"

#if defined(TARN_WITH_CUDA) && __has_include(<curand_kernel.h>) && __has_include(<cuda_runtime.h>)
#define TARN_HAVE_CURAND_REFERENCE 1
#include <cuda_runtime.h>
#define QUALIFIERS static inline
#include <curand.h>
#include <curand_kernel.h>
#endif

namespace tarn {
namespace {

#if defined(TARN_HAVE_CURAND_REFERENCE)

const uint64_t kSeeds[] = {0, 1234, (uint64_t{1} << 40) + 7, ~uint64_t{0}};
const uint64_t kStreams[] = {0, 1, (uint64_t{1} << 33) + 5};
// On and off a block boundary, and across the counter's low 32 bits.
const uint64_t kOffsets[] = {0, 1, 2, 3, 5, (uint64_t{1} << 34) - 2};
constexpr int kDraws = 11;  // crosses at least two blocks from any offset

curandStatePhilox4_32_10_t CurandAt(uint64_t seed, uint64_t stream, uint64_t offset) {
  curandStatePhilox4_32_10_t s;
  curand_init(seed, stream, offset, &s);
  return s;
}

TEST(CurandReference, RawWordsAreCurandInitsForEverySeedStreamAndOffset) {
  for (uint64_t seed : kSeeds)
    for (uint64_t stream : kStreams)
      for (uint64_t offset : kOffsets) {
        auto s = CurandAt(seed, stream, offset);
        Philox cpu(seed, stream, offset);
        for (int k = 0; k < kDraws; ++k) {
          const uint32_t want = curand(&s);
          ASSERT_EQ(philox::at(seed, stream, offset + k), want)
              << "kernels/cuda/philox.cuh, seed " << seed << " stream " << stream << " offset " << offset + k;
          ASSERT_EQ(cpu.next_u32(), want)
              << "framework/rng.h, seed " << seed << " stream " << stream << " offset " << offset + k;
        }
      }
}

TEST(CurandReference, Curand4FromAnUnalignedOffsetIsTheNextFourWords) {
  for (uint64_t offset : kOffsets) {
    auto s = CurandAt(42, 3, offset);
    const uint4 r = curand4(&s);
    const uint32_t got[4] = {r.x, r.y, r.z, r.w};
    for (int w = 0; w < 4; ++w) EXPECT_EQ(got[w], philox::at(42, 3, offset + w)) << "offset " << offset;
  }
}

TEST(CurandReference, UniformFillIsCurandUniformBitForBit) {
  for (uint64_t offset : kOffsets) {
    auto s = CurandAt(7, 9, offset);
    std::vector<float> got(kDraws);
    kernels::cpu::uniform_fill(got.data(), kDraws, 0.0f, 1.0f, {7, 9, offset});
    for (int k = 0; k < kDraws; ++k) ASSERT_EQ(got[k], curand_uniform(&s)) << "offset " << offset + k;
  }
}

// cuRAND's curand_normal makes r sin(t) and r cos(t) from one pair of words (the second is
// cached); tarn's normal i is the sine of words 2i, 2i + 1 with t rounded slightly differently
// (kernels/random.h). So tarn's normal i is cuRAND's FIRST normal after curand_init at word
// offset + 2i, to float rounding of the angle, and never uses the cosine.
TEST(CurandReference, NormalIsCurandsSineBranchToRoundingOfTheAngle) {
  constexpr int64_t n = 257;
  for (uint64_t offset : kOffsets) {
    std::vector<float> got(n);
    kernels::cpu::normal_fill(got.data(), n, 0.0f, 1.0f, {11, 13, offset});
    for (int64_t i = 0; i < n; ++i) {
      auto s = CurandAt(11, 13, offset + 2 * static_cast<uint64_t>(i));
      const float want = curand_normal(&s);
      // |angle error| <= ~2 ulp of 2 pi (1e-6) times a radius below 7.
      ASSERT_NEAR(got[i], want, 1e-5f) << "offset " << offset << " [" << i << "]";
    }
  }
}

// The host API cannot reproduce one device-API stream (why tarn draws in a kernel): its output
// 4t + w is word w of the first block of subsequence t.
TEST(CurandReference, HostApiInterleavesSubsequences) {
  curandGenerator_t gen;
  const curandStatus_t created = curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  if (created != CURAND_STATUS_SUCCESS) GTEST_SKIP() << "curandCreateGeneratorHost failed (" << created << ")";
  constexpr uint64_t seed = 1234;
  constexpr int kThreads = 4;
  std::vector<unsigned> out(4 * kThreads);
  EXPECT_EQ(curandSetPseudoRandomGeneratorSeed(gen, seed), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(curandGenerate(gen, out.data(), out.size()), CURAND_STATUS_SUCCESS);
  EXPECT_EQ(curandDestroyGenerator(gen), CURAND_STATUS_SUCCESS);
  for (int t = 0; t < kThreads; ++t)
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out[4 * t + w], philox::block(seed, t, 0).w[w]) << "output " << 4 * t + w;
}

#else

TEST(CurandReference, NeedsTheCudaToolkitHeaders) {
  GTEST_SKIP() << "built without the CUDA backend or without curand_kernel.h: cuRAND's code is the reference here";
}

#endif

}  // namespace
}  // namespace tarn
