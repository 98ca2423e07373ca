#include <gtest/gtest.h>

#include <cmath>

#include "framework/ops/nn.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::relative_error;

// log_softmax over the last axis, in double.
std::vector<double> log_softmax_reference(const Tensor& x) {
  const int64_t cols = x.shape().back(), rows = x.numel() / cols;
  const std::vector<float> v = x.to_vector();
  std::vector<double> r(v.size());
  for (int64_t i = 0; i < rows; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, double(v[i * cols + j]));
    for (int64_t j = 0; j < cols; ++j) s += std::exp(v[i * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) r[i * cols + j] = v[i * cols + j] - m - std::log(s);
  }
  return r;
}

const Shape kShapes[] = {Shape{7, 13}, Shape{3, 5, 17}, Shape{300, 257}, Shape{1}, Shape{2, 8000}};

TEST(Softmax, ForwardMatchesDoubleReference) {
  for (const Shape& s : kShapes) {
    Tensor x = random_tensor(s, 1, -8.0f, 8.0f);
    std::vector<double> ref = log_softmax_reference(x);
    EXPECT_LT(relative_error(log_softmax(x).to_vector(), ref), 1e-6) << s.str();
    for (double& v : ref) v = std::exp(v);
    EXPECT_LT(relative_error(softmax(x).to_vector(), ref), 1e-6) << s.str();
  }
}

TEST(Softmax, LargeLogitsStayFiniteAndRowsSumToOne) {
  Tensor x = random_tensor({4, 33}, 2, -1.0f, 1.0f);
  float* p = x.f32();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] * 1e4f + (i % 2 ? 3e4f : -3e4f);
  const std::vector<float> y = softmax(x).to_vector(), ly = log_softmax(x).to_vector();
  for (int r = 0; r < 4; ++r) {
    double s = 0;
    for (int c = 0; c < 33; ++c) {
      ASSERT_TRUE(std::isfinite(y[r * 33 + c]));
      ASSERT_TRUE(std::isfinite(ly[r * 33 + c]) || y[r * 33 + c] == 0.0f);
      s += y[r * 33 + c];
    }
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(Softmax, MaskedEntriesGetZeroProbability) {
  Tensor x = Tensor::from_vector({0.5f, -INFINITY, 1.5f, -1e9f}, {1, 4});
  const std::vector<float> y = softmax(x).to_vector();
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_NEAR(y[0] + y[2], 1.0f, 1e-7);
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 17}}) {
    EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& in) { return softmax(in[0]); }, {param(s, 3, -2, 2)}));
    EXPECT_TRUE(
        gradients_match([](const std::vector<Tensor>& in) { return log_softmax(in[0]); }, {param(s, 4, -2, 2)}));
  }
}

TEST(Softmax, BackwardMatchesAnalyticOnLargeInputs) {
  // softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - softmax sum(dy); rows of 257.
  Tensor x = param({300, 257}, 5, -3, 3);
  Tensor dy = random_tensor({300, 257}, 6);
  const std::vector<double> lp = log_softmax_reference(x);
  const std::vector<float> g = dy.to_vector();
  std::vector<double> ref_soft(lp.size()), ref_log(lp.size());
  for (int r = 0; r < 300; ++r) {
    double dot = 0, total = 0;
    for (int c = 0; c < 257; ++c) {
      dot += g[r * 257 + c] * std::exp(lp[r * 257 + c]);
      total += g[r * 257 + c];
    }
    for (int c = 0; c < 257; ++c) {
      const double y = std::exp(lp[r * 257 + c]);
      ref_soft[r * 257 + c] = y * (g[r * 257 + c] - dot);
      ref_log[r * 257 + c] = g[r * 257 + c] - y * total;
    }
  }
  softmax(x).backward(dy);
  EXPECT_LT(relative_error(x.grad().to_vector(), ref_soft), 1e-5);
  x.zero_grad();
  log_softmax(x).backward(dy);
  EXPECT_LT(relative_error(x.grad().to_vector(), ref_log), 1e-5);
}

}  // namespace
}  // namespace tarn
