// Distribution checks of the Philox transforms. Tolerances are ~5 standard errors of each
// estimate for kDraws samples, so a correct generator fails with probability < 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/rng.h"

namespace tarn {
namespace {

constexpr int kDraws = 1 << 20;
const double kSqrtN = std::sqrt(static_cast<double>(kDraws));

TEST(PhiloxDistribution, UniformIsInHalfOpenUnitIntervalWithMomentsOfU01) {
  Philox rng(2024, 0);
  double sum = 0, sum_sq = 0;
  float lo = 2, hi = -1;
  for (int i = 0; i < kDraws; ++i) {
    const float u = rng.uniform();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
  }
  EXPECT_GT(lo, 0.0f);
  EXPECT_LE(hi, 1.0f);
  const double mean = sum / kDraws, var = sum_sq / kDraws - mean * mean;
  // U(0,1): mean 1/2 (sd 0.289/sqrt N), variance 1/12 (sd of the estimate 0.0745/sqrt N).
  EXPECT_NEAR(mean, 0.5, 5 * 0.2887 / kSqrtN);
  EXPECT_NEAR(var, 1.0 / 12.0, 5 * 0.0745 / kSqrtN);
}

TEST(PhiloxDistribution, UniformEndpointsMatchCurandMapping) {
  // curand_uniform: x * 2^-32 + 2^-33: the smallest value is 2^-33, the largest rounds to 1.
  EXPECT_EQ(uint_to_uniform(0), std::ldexp(1.0f, -33));
  EXPECT_EQ(uint_to_uniform(0xffffffffu), 1.0f);
  EXPECT_GT(uint_to_uniform(1), uint_to_uniform(0));
}

TEST(PhiloxDistribution, NormalHasZeroMeanUnitVarianceAndNoSkew) {
  Philox rng(77, 5);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = rng.normal();
    ASSERT_TRUE(std::isfinite(x));
    s1 += x;
    s2 += x * x;
    s3 += x * x * x;
    s4 += x * x * x * x;
  }
  const double mean = s1 / kDraws, var = s2 / kDraws - mean * mean;
  const double skew = (s3 / kDraws) / std::pow(var, 1.5), kurt = (s4 / kDraws) / (var * var);
  // Standard errors: mean 1/sqrt N, variance sqrt(2/N), skewness sqrt(6/N), kurtosis sqrt(24/N).
  EXPECT_NEAR(mean, 0.0, 5 / kSqrtN);
  EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2.0) / kSqrtN);
  EXPECT_NEAR(skew, 0.0, 5 * std::sqrt(6.0) / kSqrtN);
  EXPECT_NEAR(kurt, 3.0, 5 * std::sqrt(24.0) / kSqrtN);
}

TEST(PhiloxDistribution, NormalTailsHaveGaussianMass) {
  // P(|x| > 2) = 0.0455, P(|x| > 3) = 0.0027 for N(0, 1).
  Philox rng(8, 8);
  int over2 = 0, over3 = 0;
  for (int i = 0; i < kDraws; ++i) {
    const float x = std::fabs(rng.normal());
    over2 += x > 2.0f;
    over3 += x > 3.0f;
  }
  const auto tol = [](double p) { return 5 * std::sqrt(p * (1 - p) / kDraws); };
  EXPECT_NEAR(static_cast<double>(over2) / kDraws, 0.04550, tol(0.0455));
  EXPECT_NEAR(static_cast<double>(over3) / kDraws, 0.00270, tol(0.0027));
}

TEST(PhiloxDistribution, BelowStaysInRangeAndHitsEveryValueEvenly) {
  for (uint32_t n : {1u, 2u, 7u, 1000u}) {
    Philox rng(11, n);
    std::vector<int> counts(n, 0);
    const int draws = 200 * static_cast<int>(n) + 1000;
    for (int i = 0; i < draws; ++i) {
      const uint32_t x = rng.below(n);
      ASSERT_LT(x, n);
      ++counts[x];
    }
    // Chi-square over n cells, compared with its mean (n-1) + 6 sd (sqrt(2(n-1))).
    const double expected = static_cast<double>(draws) / n;
    double chi2 = 0;
    for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
    EXPECT_LT(chi2, (n - 1) + 6 * std::sqrt(2.0 * (n - 1)) + 1e-9) << "n = " << n;
  }
}

TEST(PhiloxDistribution, BelowReachesTheTopOfALargeRange) {
  const uint32_t n = 0xfffffff0u;
  Philox rng(3);
  uint32_t top = 0;
  for (int i = 0; i < 4096; ++i) top = std::max(top, rng.below(n));
  EXPECT_LT(top, n);
  EXPECT_GT(top, n - n / 256);  // the max of 4096 draws sits within n/256 of n w.p. > 1 - 1e-7
}

TEST(PhiloxDistribution, ConsecutiveUniformsAreUncorrelated) {
  Philox rng(19, 1);
  double sxy = 0, sx = 0, sxx = 0;
  float prev = rng.uniform();
  for (int i = 0; i < kDraws; ++i) {
    const float u = rng.uniform();
    sxy += static_cast<double>(prev) * u;
    sx += u;
    sxx += static_cast<double>(u) * u;
    prev = u;
  }
  const double mean = sx / kDraws, var = sxx / kDraws - mean * mean;
  const double corr = (sxy / kDraws - mean * mean) / var;
  EXPECT_NEAR(corr, 0.0, 5 / kSqrtN);
}

}  // namespace
}  // namespace tarn
