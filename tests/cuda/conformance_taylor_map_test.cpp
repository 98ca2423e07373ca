// CUDA Taylor feature map (kernels/cuda/taylor_map.cu) against the CPU kernel of
// kernels/taylor_map.h, forward and backward, at Based's settings (r 16, order 2), at order 4
// with r 8 and r 16 (4,845 features: the table fills 38 KiB of shared memory), and at odd
// shapes (r 3, order 3; one row; no rows).
//
// Tolerance: a feature is a product of at most 2P + 1 rounded factors (the device: the
// coefficient and P inputs each scaled once; the CPU: P steps of an input and a factor), within
// gamma_{4P+2} of exact on each side; an element of dp sums, over the features, products of at
// most 2P + 1 factors, and the CPU's reverse pass adds each feature's gradient into its parent's
// first: within gamma_{2F + 4P + 2} of the sum of their magnitudes (FMA contraction or not), on
// each side.
//
// Thread orders: every test runs under the three emulated orders (and on a GPU when there is
// one). The barrier after the table is load-bearing: without it a thread reads entries another
// thread has not written yet.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda_taylor_map.h"
#include "kernels/taylor_map.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

class TaylorMapConformance : public Conformance {};

// |phi_f| in double for every row and feature, from the CPU's own table of index tuples.
std::vector<double> FeatureMagnitudes(const cpu::TaylorMapDims& d, const std::vector<float>& p) {
  const int64_t features = cpu::taylor_feature_count(d.r, d.order);
  const double s = 1.0 / std::pow(double(d.r), 0.25);
  std::vector<double> m(static_cast<size_t>(d.rows * features));
  for (int64_t f = 0; f < features; ++f) {
    const cpu::TaylorFeature tf = cpu::taylor_feature(d.r, f);
    for (int64_t row = 0; row < d.rows; ++row) {
      double x = tf.coef;
      for (int j = 0; j < tf.degree; ++j) x *= std::fabs(p[row * d.r + cpu::taylor_index(tf.packed, j)]) * s;
      m[row * features + f] = x;
    }
  }
  return m;
}

// sum_f |g_f| |d phi_f / d p_i| in double.
std::vector<double> GradientMagnitudes(const cpu::TaylorMapDims& d, const std::vector<float>& p,
                                       const std::vector<float>& g) {
  const int64_t features = cpu::taylor_feature_count(d.r, d.order);
  const double s = 1.0 / std::pow(double(d.r), 0.25);
  std::vector<double> m(static_cast<size_t>(d.rows * d.r), 0.0);
  for (int64_t f = 1; f < features; ++f) {
    const cpu::TaylorFeature tf = cpu::taylor_feature(d.r, f);
    for (int64_t row = 0; row < d.rows; ++row)
      for (int j = 0; j < tf.degree; ++j) {
        double x = std::fabs(double(g[row * features + f])) * tf.coef * s;
        for (int l = 0; l < tf.degree; ++l)
          if (l != j) x *= std::fabs(p[row * d.r + cpu::taylor_index(tf.packed, l)]) * s;
        m[row * d.r + cpu::taylor_index(tf.packed, j)] += x;
      }
  }
  return m;
}

TEST_P(TaylorMapConformance, ForwardAndBackwardMatchTheCpu) {
  for (const cpu::TaylorMapDims d : {cpu::TaylorMapDims{37, 16, 2}, cpu::TaylorMapDims{29, 8, 4},
                                     cpu::TaylorMapDims{3, 16, 4}, cpu::TaylorMapDims{5, 3, 3},
                                     cpu::TaylorMapDims{1, 1, 1}, cpu::TaylorMapDims{0, 8, 4}}) {
    std::ostringstream os;
    os << "rows=" << d.rows << " r=" << d.r << " order=" << d.order;
    const int64_t features = cpu::taylor_feature_count(d.r, d.order);
    const size_t inputs = static_cast<size_t>(d.rows * d.r), outputs = static_cast<size_t>(d.rows * features);
    const std::vector<float> p = Random(inputs, -2.0f, 2.0f, 1), g = Random(outputs, -1.0f, 1.0f, 2);
    std::vector<float> phi(outputs), dp(inputs);
    cpu::taylor_map_forward(d, p.data(), phi.data());
    cpu::taylor_map_backward(d, p.data(), g.data(), dp.data());
    DeviceArray<float> gp = dev(p), gg = dev(g), gphi = out(outputs), gdp = out(inputs);
    TARN_ON(target(), taylor_map_forward, d, gp.get(), gphi.get());
    TARN_ON(target(), taylor_map_backward, d, gp.get(), gg.get(), gdp.get());
    const double per_side_product = Gamma(4 * d.order + 2, kF32);
    const double per_side_sum = Gamma(2 * features + 4 * d.order + 2, kF32);
    EXPECT_TRUE(WithinBound(gphi.host(), phi, Scaled(FeatureMagnitudes(d, p), 2 * per_side_product)))
        << os.str() << ": phi";
    EXPECT_TRUE(WithinBound(gdp.host(), dp, Scaled(GradientMagnitudes(d, p, g), 2 * per_side_sum)))
        << os.str() << ": dp";
  }
}

TEST_P(TaylorMapConformance, RefusesMoreFeaturesThanItsTableHolds) {
  const cpu::TaylorMapDims d{1, 17, 4};  // C(21, 4) = 5,985 > kMaxTaylorFeatures
  DeviceArray<float> gp = dev(std::vector<float>(17, 0.5f)), gphi = out(1);
  EXPECT_THROW(TARN_ON(target(), taylor_map_forward, d, gp.get(), gphi.get()), Error);
}

INSTANTIATE_TEST_SUITE_P(Targets, TaylorMapConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
