// Random fills (kernels/random.h): the CUDA fills against the CPU fills under every emulator
// thread order (and on a GPU when there is one), and the CPU fills against framework/rng.h's
// Philox, the stream a run's checkpoint resumes. cuRAND itself: curand_reference_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/rng.h"
#include "kernels/check.h"
#include "kernels/random.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

using kernels::PhiloxPosition;

// Not a multiple of the 4 words a thread draws, nor of a block of threads.
constexpr int64_t kN = 1031;
// Offsets on and off a Philox block boundary, and one past 2^32 words (the counter's high half).
const uint64_t kOffsets[] = {0, 1, 3, 6, (uint64_t{1} << 32) + 2};

std::vector<float> CpuUniform(int64_t n, float low, float high, const PhiloxPosition& at) {
  std::vector<float> v(n);
  kernels::cpu::uniform_fill(v.data(), n, low, high, at);
  return v;
}
std::vector<float> CpuNormal(int64_t n, float mean, float stddev, const PhiloxPosition& at) {
  std::vector<float> v(n);
  kernels::cpu::normal_fill(v.data(), n, mean, stddev, at);
  return v;
}

class RandomConformance : public Conformance {};

// How far the GPU's normal i may be from the CPU's: both turn the same two words into the same
// floats u and angle (kernels/random.h: exact products, one rounding each, identically), then
// compute fma(stddev, sqrt(-2 log u) sin(angle), mean) with their own logf and sinf (CUDA 1
// and 2 ulps, glibc 1 and 1) and an IEEE sqrt: each side's running error bound, summed.
std::vector<double> NormalBound(int64_t n, float mean, float stddev, const PhiloxPosition& at) {
  std::vector<double> bound(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t word = at.offset + 2 * static_cast<uint64_t>(i);
    const float u = kernels::random_math::to_uniform(philox::at(at.seed, at.stream, word));
    const float angle = kernels::random_math::to_uniform(philox::at(at.seed, at.stream, word + 1)) *
                        kernels::random_math::kTwoPi;
    for (const Rounding* side : {&kCudaF32, &kCpuF32}) {
      const Bounded z = Sqrt(-2.0 * Log(Exact(*side, u))) * Sin(Exact(*side, angle));
      bound[i] += (stddev * z + mean).err;
    }
  }
  return bound;
}

TEST_P(RandomConformance, UniformFillIsTheCpusBitForBit) {
  for (uint64_t offset : kOffsets) {
    const PhiloxPosition at{0x5eed1234abcdULL, 7, offset};
    auto out = this->out(kN);
    TARN_ON(target(), uniform_fill, out.get(), kN, -2.0f, 3.0f, at);
    EXPECT_TRUE(BitwiseEqual(out.host(), CpuUniform(kN, -2.0f, 3.0f, at))) << "offset " << offset;
  }
}

TEST_P(RandomConformance, NormalFillIsTheCpusToAFewUlp) {
  for (uint64_t offset : kOffsets) {
    const PhiloxPosition at{99, (uint64_t{1} << 40) + 3, offset};
    auto out = this->out(kN);
    TARN_ON(target(), normal_fill, out.get(), kN, 0.5f, 2.0f, at);
    const auto want = CpuNormal(kN, 0.5f, 2.0f, at);
    if (target() == Target::gpu) {
      EXPECT_TRUE(WithinBound(out.host(), want, NormalBound(kN, 0.5f, 2.0f, at))) << "offset " << offset;
    } else {
      EXPECT_TRUE(BitwiseEqual(out.host(), want)) << "offset " << offset;
    }
  }
}

TEST_P(RandomConformance, ShortFillsWriteExactlyTheirLength) {
  // Lengths below one thread's four words leave the rest of the buffer untouched.
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}}) {
    const PhiloxPosition at{3, 4, 5};
    auto u = this->out(8), z = this->out(8);
    TARN_ON(target(), uniform_fill, u.get(), n, 0.0f, 1.0f, at);
    TARN_ON(target(), normal_fill, z.get(), n, 0.0f, 1.0f, at);
    const auto uh = u.host(), zh = z.host();
    const auto uw = CpuUniform(n, 0.0f, 1.0f, at), zw = CpuNormal(n, 0.0f, 1.0f, at);
    const auto zbound = NormalBound(n, 0.0f, 1.0f, at);
    for (int64_t i = 0; i < 8; ++i) {
      if (i < n) {
        EXPECT_EQ(uh[i], uw[i]) << "n " << n << " [" << i << "]";
        EXPECT_TRUE(WithinBound(zh[i], zw[i], zbound[i])) << "n " << n << " [" << i << "]";
      } else {
        EXPECT_TRUE(std::isnan(uh[i]) && std::isnan(zh[i])) << "n " << n << " wrote past the end at " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, RandomConformance, ::testing::ValuesIn(kAllTargets), TargetName);

// The CPU fill is the framework generator's stream: a run that initialises on one device and
// resumes on the other draws the same numbers.
TEST(RandomFill, CpuUniformIsTheFrameworkPhiloxStream) {
  for (uint64_t offset : kOffsets) {
    Philox rng(0xfeedULL, 11, offset);
    const auto got = CpuUniform(kN, 0.0f, 1.0f, {0xfeedULL, 11, offset});
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got[i], rng.uniform()) << "offset " << offset << " [" << i << "]";
  }
}

TEST(RandomFill, CpuNormalIsTheFrameworkPhiloxStream) {
  for (uint64_t offset : kOffsets) {
    Philox rng(0xfeedULL, 12, offset);
    const auto got = CpuNormal(kN, 0.0f, 1.0f, {0xfeedULL, 12, offset});
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got[i], rng.normal()) << "offset " << offset << " [" << i << "]";
    EXPECT_EQ(rng.state().offset, offset + kernels::normal_fill_words(kN));
  }
}

TEST(RandomFill, AFillContinuesWhereThePreviousEnded) {
  const PhiloxPosition at{17, 2, 5};
  const auto whole_u = CpuUniform(kN, 0.0f, 1.0f, at);
  const auto whole_z = CpuNormal(kN, 0.0f, 1.0f, at);
  const int64_t head = 333;
  std::vector<float> u(kN), z(kN);
  kernels::cuda_emu::uniform_fill(u.data(), head, 0.0f, 1.0f, at);
  kernels::cuda_emu::uniform_fill(u.data() + head, kN - head, 0.0f, 1.0f, {17, 2, 5 + head});
  kernels::cuda_emu::normal_fill(z.data(), head, 0.0f, 1.0f, at);
  kernels::cuda_emu::normal_fill(z.data() + head, kN - head, 0.0f, 1.0f,
                                 {17, 2, 5 + kernels::normal_fill_words(head)});
  EXPECT_TRUE(BitwiseEqual(u, whole_u));
  EXPECT_TRUE(BitwiseEqual(z, whole_z));
}

TEST(RandomFill, UniformStaysInItsIntervalAndNormalHasUnitMoments) {
  constexpr int64_t n = 200000;
  const auto u = CpuUniform(n, -1.0f, 2.0f, {5, 0, 0});
  for (float x : u) ASSERT_TRUE(x > -1.0f && x <= 2.0f) << x;
  const auto z = CpuNormal(n, 0.0f, 1.0f, {5, 1, 0});
  double mean = 0.0, sq = 0.0;
  for (float x : z) {
    mean += x;
    sq += static_cast<double>(x) * x;
  }
  mean /= n;
  const double var = sq / n - mean * mean;
  // 5 standard errors: sd(mean) = 1/sqrt(n) ~ 0.0022, sd(var) = sqrt(2/n) ~ 0.0032.
  EXPECT_NEAR(mean, 0.0, 0.011);
  EXPECT_NEAR(var, 1.0, 0.016);
}

TEST(RandomFill, BadArgumentsAreErrorsThatNameTheFill) {
  std::vector<float> v(4);
  for (auto fill : {kernels::cpu::uniform_fill, kernels::cuda_emu::uniform_fill}) {
    EXPECT_THROW(fill(v.data(), -1, 0.0f, 1.0f, {}), Error);
    EXPECT_THROW(fill(nullptr, 4, 0.0f, 1.0f, {}), Error);
    EXPECT_THROW(fill(v.data(), 4, 1.0f, 0.0f, {}), Error);
  }
  for (auto fill : {kernels::cpu::normal_fill, kernels::cuda_emu::normal_fill}) {
    EXPECT_THROW(fill(v.data(), 4, 0.0f, -1.0f, {}), Error);
  }
  try {
    kernels::cpu::uniform_fill(v.data(), 4, 1.0f, 0.0f, {});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uniform_fill"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tarn::cuda_testing
