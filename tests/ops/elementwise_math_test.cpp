#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/elementwise_math.h"

namespace tarn {
namespace {

namespace math = kernels::cpu::math;

// Walks [lo, hi) in steps of about `step` ulps-worth of the range, returns max relative error.
template <typename F, typename R>
double max_relative_error(F f, R ref, float lo, float hi, int samples, double floor) {
  double worst = 0;
  for (int i = 0; i < samples; ++i) {
    const float x = lo + (hi - lo) * (static_cast<float>(i) + 0.5f) / static_cast<float>(samples);
    const double r = ref(static_cast<double>(x));
    worst = std::max(worst, std::fabs(f(x) - r) / std::max(std::fabs(r), floor));
  }
  return worst;
}

constexpr double kUlp = 5.96e-8;  // 2^-24: half the spacing of floats in [1, 2)

TEST(ElementwiseMath, ExpIsWithinTwoUlpOverTheNormalRange) {
  EXPECT_LT(max_relative_error(math::exp, [](double x) { return std::exp(x); }, -87.0f, 88.7f, 200000, 0), 2.5 * kUlp);
  EXPECT_LT(max_relative_error(math::exp, [](double x) { return std::exp(x); }, -1e-3f, 1e-3f, 20000, 0), 2.5 * kUlp);
}

TEST(ElementwiseMath, ExpHandlesOverflowUnderflowAndNaN) {
  EXPECT_EQ(math::exp(89.0f), INFINITY);
  EXPECT_EQ(math::exp(INFINITY), INFINITY);
  EXPECT_EQ(math::exp(-INFINITY), 0.0f);
  EXPECT_EQ(math::exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(math::exp(NAN)));
  EXPECT_NEAR(math::exp(-95.0f), std::exp(-95.0), 1.5e-45);  // subnormal
  EXPECT_GT(math::exp(88.7f), 3.0e38f);
}

TEST(ElementwiseMath, TanhIsWithinThreeUlpEverywhere) {
  auto ref = [](double x) { return std::tanh(x); };
  EXPECT_LT(max_relative_error(math::tanh, ref, -10.0f, 10.0f, 200000, 0), 3 * kUlp);
  EXPECT_LT(max_relative_error(math::tanh, ref, -1e-4f, 1e-4f, 2000, 0), 3 * kUlp);
  EXPECT_EQ(math::tanh(50.0f), 1.0f);
  EXPECT_EQ(math::tanh(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(math::tanh(NAN)));
}

TEST(ElementwiseMath, ErfHasSmallAbsoluteAndRelativeError) {
  auto ref = [](double x) { return std::erf(x); };
  EXPECT_LT(max_relative_error(math::erf, ref, -6.0f, 6.0f, 200000, 1.0), 6 * kUlp);  // absolute near +-1
  EXPECT_LT(max_relative_error(math::erf, ref, -0.5f, 0.5f, 20000, 0), 6 * kUlp);     // relative near 0
  EXPECT_EQ(math::erf(INFINITY), 1.0f);
  EXPECT_EQ(math::erf(-10.0f), -1.0f);
  EXPECT_TRUE(std::isnan(math::erf(NAN)));
}

}  // namespace
}  // namespace tarn
