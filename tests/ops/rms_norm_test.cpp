// RMS norm (framework/ops/nn.h, kernels/rms_norm.h) against its definition in double, its
// gradients against central differences, and its parameter gradient for any thread count.
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

struct Reference {
  std::vector<double> y, dx, dgamma;
};
// y = x rs gamma, rs = 1 / sqrt(sum x^2 / divisor + eps); gamma undefined = 1.
Reference reference(const Tensor& x, const Tensor& gamma, const Tensor& dy, double divisor, double eps) {
  const int64_t cols = x.shape().back(), rows = x.numel() / cols;
  const std::vector<float> xv = x.to_vector(), g = dy.to_vector();
  const std::vector<float> gv = gamma.defined() ? gamma.to_vector() : std::vector<float>(cols, 1.0f);
  Reference r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  r.dgamma.assign(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0, sgx = 0;
    for (int64_t j = 0; j < cols; ++j) ss += double(xv[i * cols + j]) * xv[i * cols + j];
    const double rs = 1 / std::sqrt(ss / divisor + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const double xj = xv[i * cols + j], gj = g[i * cols + j] * double(gv[j]);
      r.y[i * cols + j] = xj * rs * gv[j];
      r.dgamma[j] += g[i * cols + j] * xj * rs;
      sgx += gj * xj;
    }
    for (int64_t j = 0; j < cols; ++j)
      r.dx[i * cols + j] = rs * g[i * cols + j] * double(gv[j]) - xv[i * cols + j] * rs * rs * rs * sgx / divisor;
  }
  return r;
}

TEST(RmsNorm, ForwardAndBackwardMatchDoubleReference) {
  for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 64}, Shape{300, 257}}) {
    const int64_t cols = s.back();
    for (const bool mean : {true, false}) {  // RMSNorm, or unit rows
      const float divisor = mean ? static_cast<float>(cols) : 1.0f;
      Tensor x = param(s, 1, -3, 5), gamma = param({cols}, 2, 0.5f, 1.5f);
      Tensor dy = random_tensor(s, 4);
      const Reference ref = reference(x, mean ? gamma : Tensor(), dy, divisor, 1e-6);
      Tensor y = rms_norm(x, mean ? gamma : Tensor(), divisor, 1e-6f);
      EXPECT_LT(relative_error(y.to_vector(), ref.y), 2e-6) << s.str() << " mean " << mean;
      y.backward(dy);
      EXPECT_LT(relative_error(x.grad().to_vector(), ref.dx), 1e-5) << s.str() << " mean " << mean;
      if (mean) {
        EXPECT_LT(relative_error(gamma.grad().to_vector(), ref.dgamma), 1e-5) << s.str();
      }
    }
  }
}

TEST(RmsNorm, UnitRowsHaveLengthOne) {
  const std::vector<float> y = rms_norm(random_tensor({16, 64}, 5, -2.0f, 3.0f), Tensor(), 1.0f, 1e-6f).to_vector();
  for (int r = 0; r < 16; ++r) {
    double len = 0;
    for (int c = 0; c < 64; ++c) len += double(y[r * 64 + c]) * y[r * 64 + c];
    EXPECT_NEAR(len, 1.0, 1e-5);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  auto fn = [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 17.0f, 1e-5f); };
  EXPECT_TRUE(gradients_match(fn, {param({3, 5, 17}, 6), param({17}, 7, 0.5f, 1.5f)}));
  auto unit = [](const std::vector<Tensor>& in) { return rms_norm(in[0], Tensor(), 1.0f, 1e-6f); };
  EXPECT_TRUE(gradients_match(unit, {param({7, 13}, 12)}));
}

TEST(RmsNorm, ParameterGradientIsBitIdenticalForAnyThreadCount) {
  Tensor x = random_tensor({1000, 96}, 13), gamma = random_tensor({96}, 14), dy = random_tensor({1000, 96}, 16);
  auto run = [&] {
    Tensor xl = x.clone().set_requires_grad(true), gl = gamma.clone().set_requires_grad(true);
    rms_norm(xl, gl, 96.0f, 1e-5f).backward(dy);
    std::vector<float> r = gl.grad().to_vector();
    for (float v : xl.grad().to_vector()) r.push_back(v);
    return r;
  };
  EXPECT_EQ(testing::with_threads(1, run), testing::with_threads(2, run));
}

TEST(RmsNorm, MismatchedGammaThrowsNamingTheShapes) {
  try {
    (void)rms_norm(random_tensor({4, 8}, 1), random_tensor({7}, 2), 8.0f, 1e-5f);
    FAIL() << "a gamma of the wrong size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm: gamma of shape (7) does not match the last axis of x (4, 8)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tarn
