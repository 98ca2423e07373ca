// The Taylor feature map (kernels/taylor_map.h, framework/ops/attention.h's taylor_feature_map):
// features against their definition in double (enumerated here by nested loops, independently of
// the kernel's unranking), the kernel identity phi(p).phi(p') = sum_{n <= P} x^n / n!, the
// backward against the derivative in double and, through autograd, against central differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "framework/ops/attention.h"
#include "kernels/taylor_map.h"
#include "tests/common/gradcheck.h"

namespace tarn::testing {
namespace {

namespace kc = kernels::cpu;

// The features of one row in double, in the documented order: degree by degree, index tuples
// i_1 <= ... <= i_n in lexicographic order; u^alpha / sqrt(alpha!) with u = p / r^(1/4). With
// `wrt` >= 0, the derivative of each feature with respect to p_wrt instead.
std::vector<double> features_in_double(const std::vector<float>& p, int order, int wrt = -1) {
  const int r = static_cast<int>(p.size());
  const double s = 1.0 / std::pow(double(r), 0.25);
  std::vector<double> out;
  std::vector<int> idx;
  std::function<void(int, int)> emit = [&](int left, int lo) {
    if (left == 0) {
      double value = 1.0, factorial = 1.0, run = 0.0, derivative = 0.0;
      for (size_t j = 0; j < idx.size(); ++j) {
        run = j > 0 && idx[j] == idx[j - 1] ? run + 1 : 1;
        factorial *= run;
        value *= p[idx[j]] * s;
      }
      for (size_t j = 0; j < idx.size(); ++j) {  // product rule
        if (idx[j] != wrt) continue;
        double term = s;
        for (size_t l = 0; l < idx.size(); ++l)
          if (l != j) term *= p[idx[l]] * s;
        derivative += term;
      }
      out.push_back((wrt >= 0 ? derivative : value) / std::sqrt(factorial));
      return;
    }
    for (int i = lo; i < r; ++i) {
      idx.push_back(i);
      emit(left - 1, i);
      idx.pop_back();
    }
  };
  for (int n = 0; n <= order; ++n) emit(n, 0);
  return out;
}

TEST(TaylorMap, FeatureCountIsTheMultisetsOfAtMostPIndices) {
  EXPECT_EQ(kc::taylor_feature_count(16, 2), 153);
  EXPECT_EQ(kc::taylor_feature_count(16, 4), 4845);
  EXPECT_EQ(kc::taylor_feature_count(8, 4), 495);
  EXPECT_EQ(kc::taylor_feature_count(1, 3), 4);
  for (int r : {1, 3, 8})
    for (int order = 1; order <= kc::kMaxTaylorOrder; ++order)
      EXPECT_EQ(kc::taylor_feature_count(r, order),
                static_cast<int64_t>(features_in_double(std::vector<float>(r, 1.0f), order).size()))
          << "r " << r << " order " << order;
}

TEST(TaylorMap, ForwardMatchesTheDefinitionInDouble) {
  for (int r : {1, 3, 8, 16})
    for (int order = 1; order <= kc::kMaxTaylorOrder; ++order) {
      const int64_t rows = 5, features = kc::taylor_feature_count(r, order);
      const Tensor p = random_tensor({rows, r}, 7 + r, -2.0f, 2.0f);
      const std::vector<float> pv = p.to_vector();
      std::vector<float> got(static_cast<size_t>(rows * features));
      kc::taylor_map_forward({rows, r, order}, pv.data(), got.data());
      std::vector<double> want;
      for (int64_t row = 0; row < rows; ++row) {
        const std::vector<double> f =
            features_in_double(std::vector<float>(pv.begin() + row * r, pv.begin() + (row + 1) * r), order);
        want.insert(want.end(), f.begin(), f.end());
      }
      EXPECT_LT(relative_error(got, want), 1e-6) << "r " << r << " order " << order;
    }
}

TEST(TaylorMap, DotProductOfFeaturesIsExpsSeriesToOrderP) {
  for (int order : {2, 4}) {
    const int r = 8;
    const int64_t features = kc::taylor_feature_count(r, order);
    const Tensor p = random_tensor({2, r}, 3, -1.5f, 1.5f);
    const Tensor phi = taylor_feature_map(p, order);
    const std::vector<float> pv = p.to_vector(), fv = phi.to_vector();
    double x = 0.0, dot = 0.0;
    for (int i = 0; i < r; ++i) x += double(pv[i]) * pv[r + i];
    x /= std::sqrt(double(r));
    for (int64_t f = 0; f < features; ++f) dot += double(fv[f]) * fv[features + f];
    double series = 0.0, term = 1.0;
    for (int n = 0; n <= order; ++n, term *= x / n) series += term;
    EXPECT_NEAR(dot, series, 1e-5 * std::max(1.0, std::fabs(series))) << "order " << order << " x " << x;
  }
}

TEST(TaylorMap, BackwardMatchesTheDerivativeInDouble) {
  for (int r : {3, 8})
    for (int order : {1, 2, 4}) {
      const int64_t rows = 4, features = kc::taylor_feature_count(r, order);
      const std::vector<float> pv = random_tensor({rows, r}, 11, -2.0f, 2.0f).to_vector();
      const std::vector<float> g = random_tensor({rows, features}, 12).to_vector();
      std::vector<float> got(pv.size());
      kc::taylor_map_backward({rows, r, order}, pv.data(), g.data(), got.data());
      std::vector<double> want;
      for (int64_t row = 0; row < rows; ++row) {
        const std::vector<float> prow(pv.begin() + row * r, pv.begin() + (row + 1) * r);
        for (int i = 0; i < r; ++i) {
          const std::vector<double> d = features_in_double(prow, order, i);
          double acc = 0.0;
          for (int64_t f = 0; f < features; ++f) acc += g[row * features + f] * d[f];
          want.push_back(acc);
        }
      }
      EXPECT_LT(relative_error(got, want), 1e-5) << "r " << r << " order " << order;
    }
}

TEST(TaylorMap, GradientsMatchFiniteDifferences) {
  for (int order : {2, 4}) {
    Tensor p = random_tensor({2, 3, 5}, 21);
    p.set_requires_grad(true);
    EXPECT_TRUE(gradients_match([order](const std::vector<Tensor>& in) { return taylor_feature_map(in[0], order); },
                                {p}))
        << "order " << order;
  }
}

TEST(TaylorMap, RefusesAnOrderOrWidthOutOfRange) {
  const Tensor p = random_tensor({2, 4}, 1);
  EXPECT_THROW(taylor_feature_map(p, 0), Error);
  EXPECT_THROW(taylor_feature_map(p, kc::kMaxTaylorOrder + 1), Error);
  EXPECT_THROW(taylor_feature_map(random_tensor({1, 256}, 1), 2), Error);
}

}  // namespace
}  // namespace tarn::testing
