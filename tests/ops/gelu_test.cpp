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

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_exact_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

TEST(Gelu, ForwardAndBackwardMatchDoubleReference) {
  for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 17}, Shape{300, 257}}) {
    for (GeluKind kind : {GeluKind::exact, GeluKind::tanh}) {
      Tensor x = param(s, 1, -6, 6);
      Tensor dy = random_tensor(s, 2);
      const std::vector<float> xv = x.to_vector(), g = dy.to_vector();
      std::vector<double> y(xv.size()), dx(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        y[i] = kind == GeluKind::exact ? gelu_exact(xv[i]) : gelu_tanh(xv[i]);
        dx[i] = g[i] * (kind == GeluKind::exact ? gelu_exact_grad(xv[i]) : gelu_tanh_grad(xv[i]));
      }
      Tensor out = gelu(x, kind);
      EXPECT_LT(relative_error(out.to_vector(), y), 1e-6) << s.str();
      out.backward(dy);
      EXPECT_LT(relative_error(x.grad().to_vector(), dx), 1e-6) << s.str();
    }
  }
}

TEST(Gelu, ExactFormIsAccurateNearZeroAndInTheTails) {
  Tensor x = Tensor::from_vector({0.0f, 1e-6f, -1e-6f, 1e-3f, 8.0f, -8.0f, 40.0f, -40.0f}, {8});
  const std::vector<float> y = gelu(x).to_vector();
  const std::vector<float> xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y[i], gelu_exact(xv[i]), 1e-6 * std::fabs(gelu_exact(xv[i])) + 1e-7);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[6], 40.0f);
}

TEST(Gelu, GradientsStayFiniteAndVanishFarInTheNegativeTail) {
  for (GeluKind kind : {GeluKind::exact, GeluKind::tanh}) {
    Tensor x = Tensor::from_vector({-8.0f, -10.0f, -20.0f, -1e4f, 20.0f, 1e4f}, {6});
    x.set_requires_grad(true);
    Tensor y = gelu(x, kind);
    y.backward(Tensor::ones({6}));
    const std::vector<float> yv = y.to_vector(), g = x.grad().to_vector();
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(yv[i], 0.0f, 1e-12f) << i;
      EXPECT_NEAR(g[i], 0.0f, 1e-12f) << i;
    }
    EXPECT_EQ(yv[5], 1e4f);
    EXPECT_NEAR(g[4], 1.0f, 1e-6f);
    EXPECT_NEAR(g[5], 1.0f, 1e-6f);
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  for (GeluKind kind : {GeluKind::exact, GeluKind::tanh}) {
    auto fn = [kind](const std::vector<Tensor>& in) { return gelu(in[0], kind); };
    EXPECT_TRUE(gradients_match(fn, {param({3, 5, 17}, 3, -3, 3)}));
  }
}

}  // namespace
}  // namespace tarn
