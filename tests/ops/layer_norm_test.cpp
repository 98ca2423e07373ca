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

// Forward and full backward in double from the definition.
struct Reference {
  std::vector<double> y, dx, dgamma, dbeta;
};
Reference reference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy, double eps) {
  const int64_t cols = x.shape().back(), rows = x.numel() / cols;
  const std::vector<float> xv = x.to_vector(), gv = gamma.to_vector(), bv = beta.to_vector(), g = dy.to_vector();
  Reference r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  r.dgamma.assign(cols, 0.0);
  r.dbeta.assign(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) m += xv[i * cols + j];
    m /= cols;
    for (int64_t j = 0; j < cols; ++j) var += (xv[i * cols + j] - m) * (xv[i * cols + j] - m);
    const double rs = 1 / std::sqrt(var / cols + eps);
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xv[i * cols + j] - m) * rs, gj = g[i * cols + j] * double(gv[j]);
      r.y[i * cols + j] = xh * gv[j] + bv[j];
      r.dgamma[j] += g[i * cols + j] * xh;
      r.dbeta[j] += g[i * cols + j];
      mg += gj / cols;
      mgx += gj * xh / cols;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xv[i * cols + j] - m) * rs;
      r.dx[i * cols + j] = rs * (g[i * cols + j] * double(gv[j]) - mg - xh * mgx);
    }
  }
  return r;
}

TEST(LayerNorm, ForwardAndBackwardMatchDoubleReference) {
  for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 17}, Shape{300, 257}, Shape{100, 1024}}) {
    const int64_t cols = s.back();
    Tensor x = param(s, 1, -3, 5);
    Tensor gamma = param({cols}, 2, 0.5f, 1.5f), beta = param({cols}, 3);
    Tensor dy = random_tensor(s, 4);
    const Reference ref = reference(x, gamma, beta, dy, 1e-5);
    Tensor y = layer_norm(x, gamma, beta);
    EXPECT_LT(relative_error(y.to_vector(), ref.y), 2e-6) << s.str();
    y.backward(dy);
    EXPECT_LT(relative_error(x.grad().to_vector(), ref.dx), 1e-5) << s.str();
    EXPECT_LT(relative_error(gamma.grad().to_vector(), ref.dgamma), 1e-5) << s.str();
    EXPECT_LT(relative_error(beta.grad().to_vector(), ref.dbeta), 1e-5) << s.str();
  }
}

TEST(LayerNorm, OutputRowsHaveZeroMeanAndUnitVarianceWithOffsetInputs) {
  // A large common offset is where E[x^2] - E[x]^2 would cancel (to garbage: var ~ 0.08 against
  // E[x^2] ~ 1e6 with f32 spacing 0.06); the two-pass variance does not. The mean itself is only
  // as exact as f32 at 1000 (spacing 6e-5, times rstd ~ 3.5), hence the looser mean bound.
  Tensor x = random_tensor({16, 257}, 5, 1000.0f, 1001.0f);
  const std::vector<float> y = layer_norm(x, Tensor(), Tensor(), 0.0f).to_vector();
  for (int r = 0; r < 16; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 257; ++c) m += y[r * 257 + c] / 257.0;
    for (int c = 0; c < 257; ++c) v += (y[r * 257 + c] - m) * (y[r * 257 + c] - m) / 257.0;
    EXPECT_NEAR(m, 0.0, 1e-3);
    EXPECT_NEAR(v, 1.0, 1e-3);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  auto fn = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradients_match(fn, {param({3, 5, 17}, 6), param({17}, 7, 0.5f, 1.5f), param({17}, 8)}));
  EXPECT_TRUE(gradients_match(fn, {param({7, 13}, 9), param({13}, 10, 0.5f, 1.5f), param({13}, 11)}));
  auto plain = [](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor()); };
  EXPECT_TRUE(gradients_match(plain, {param({7, 13}, 12)}));
}

TEST(LayerNorm, ParameterGradientsAreBitIdenticalForAnyThreadCount) {
  Tensor x = random_tensor({1000, 96}, 13), gamma = random_tensor({96}, 14), beta = random_tensor({96}, 15);
  Tensor dy = random_tensor({1000, 96}, 16);
  auto run = [&] {
    Tensor xl = x.clone().set_requires_grad(true), gl = gamma.clone().set_requires_grad(true),
           bl = beta.clone().set_requires_grad(true);
    layer_norm(xl, gl, bl).backward(dy);
    std::vector<float> r = gl.grad().to_vector();
    for (float v : bl.grad().to_vector()) r.push_back(v);
    for (float v : xl.grad().to_vector()) r.push_back(v);
    return r;
  };
  EXPECT_EQ(testing::with_threads(1, run), testing::with_threads(2, run));
}

TEST(LayerNorm, MismatchedParametersThrowNamingTheShapes) {
  Tensor x = Tensor::zeros({4, 8});
  testing::expect_error([&] { layer_norm(x, Tensor::ones({7}), Tensor::zeros({8})); },
                        {"layer_norm", "gamma", "(7)", "(4, 8)"});
  testing::expect_error([&] { layer_norm(x, Tensor::ones({8}), Tensor::zeros({2, 4})); },
                        {"layer_norm", "beta", "(2, 4)", "(4, 8)"});
}

}  // namespace
}  // namespace tarn
