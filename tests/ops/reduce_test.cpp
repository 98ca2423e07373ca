#include <gtest/gtest.h>

#include <cmath>

#include "framework/ops/reduce.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::relative_error;

// Sum (or mean) over `axis` of x, in double.
std::vector<double> axis_reference(const Tensor& x, int axis, bool average) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[axis];
  const std::vector<float> v = x.to_vector();
  std::vector<double> r(static_cast<size_t>(outer * inner), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) r[o * inner + j] += v[(o * n + i) * inner + j];
  if (average)
    for (double& e : r) e /= static_cast<double>(n);
  return r;
}

TEST(Reduce, SumAndMeanOverEachAxisMatchDoubleReference) {
  // Includes rows longer than one sum block (5000 > 2048) and columns past one row block (300 > 64).
  for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 17}, Shape{300, 257}, Shape{3, 5000}, Shape{2, 300, 3}}) {
    Tensor x = random_tensor(s, 1);
    for (int axis = 0; axis < s.size(); ++axis) {
      for (bool average : {false, true}) {
        Tensor y = average ? mean(x, axis) : sum(x, axis);
        EXPECT_EQ(y.dim(), s.size() - 1);
        EXPECT_LT(relative_error(y.to_vector(), axis_reference(x, axis, average)), 1e-6)
            << s.str() << " axis " << axis << (average ? " mean" : " sum");
      }
    }
  }
}

TEST(Reduce, KeepdimAndNegativeAxisGiveTheExpectedShape) {
  Tensor x = random_tensor({3, 5, 17}, 2);
  EXPECT_EQ(sum(x, -1, true).shape(), Shape({3, 5, 1}));
  EXPECT_EQ(mean(x, 1, true).shape(), Shape({3, 1, 17}));
  EXPECT_EQ(sum(x, -3).shape(), Shape({5, 17}));
  EXPECT_EQ(sum(x, -1).to_vector(), sum(x, 2).to_vector());
  testing::expect_error([&] { sum(x, 3); }, {"sum", "axis 3", "(3, 5, 17)"});
}

TEST(Reduce, SumAllOfAMillionValuesIsAccurate) {
  Tensor x = random_tensor({1000, 1001}, 3, 0.0f, 1.0f);  // a large same-sign sum loses most in f32
  double ref = 0;
  for (float v : x.to_vector()) ref += v;
  EXPECT_NEAR(sum_all(x).item(), ref, std::fabs(ref) * 1e-7);
  EXPECT_NEAR(mean_all(x).item(), ref / x.numel(), 1e-7);
  EXPECT_EQ(sum_all(x).dim(), 0);
}

TEST(Reduce, ResultsAreBitIdenticalForAnyThreadCount) {
  Tensor x = random_tensor({300, 257}, 4);
  Tensor big = random_tensor({5, 40000}, 5);
  auto run = [&] {
    std::vector<float> r = sum(x, 0).to_vector();
    for (float v : sum(x, 1).to_vector()) r.push_back(v);
    for (float v : sum(big, 1).to_vector()) r.push_back(v);
    r.push_back(sum_all(big).item());
    return r;
  };
  EXPECT_EQ(testing::with_threads(1, run), testing::with_threads(2, run));
}

TEST(Reduce, BackwardMatchesFiniteDifferences) {
  for (int axis = 0; axis < 3; ++axis) {
    for (bool keepdim : {false, true}) {
      auto s = [&](const std::vector<Tensor>& in) { return sum(in[0], axis, keepdim); };
      auto m = [&](const std::vector<Tensor>& in) { return mean(in[0], axis, keepdim); };
      EXPECT_TRUE(gradients_match(s, {param({3, 5, 17}, 6)})) << "sum axis " << axis;
      EXPECT_TRUE(gradients_match(m, {param({3, 5, 17}, 7)})) << "mean axis " << axis;
    }
  }
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return sum_all(in[0]); }, {param({7, 13}, 8)}));
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return mean_all(in[0]); }, {param({7, 13}, 9)}));
}

TEST(Reduce, MeanBackwardSpreadsTheGradientEvenly) {
  Tensor x = param({300, 257}, 10);
  mean(x, 0).backward(Tensor::ones({257}));
  for (float g : x.grad().to_vector()) EXPECT_FLOAT_EQ(g, 1.0f / 300);
  x.zero_grad();
  mean_all(x).backward();
  for (float g : x.grad().to_vector()) EXPECT_FLOAT_EQ(g, 1.0f / (300 * 257));
}

}  // namespace
}  // namespace tarn
