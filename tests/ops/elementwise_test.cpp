#include <gtest/gtest.h>

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::broadcast_reference;
using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::relative_error;
using testing::to_double;

struct BinaryCase {
  Shape a, b;
};

// Same shape, the bias case, general broadcasting both ways, a scalar, shapes that are not
// multiples of any vector width, and one past the parallel threshold (300 x 257 > 32768).
const std::vector<BinaryCase> kCases = {
    {{7, 13}, {7, 13}},       {{3, 5, 17}, {17}},     {{3, 5, 17}, {5, 17}}, {{2, 1, 9}, {2, 6, 1}},
    {{4, 6, 5}, {}},          {{}, {4, 6, 5}},        {{1}, {3, 5}},         {{5, 1}, {1, 7}},
    {{300, 257}, {300, 257}}, {{300, 257}, {257}},    {{300, 257}, {300, 1}}, {{2, 3, 1, 4}, {3, 5, 1}},
    {{17}, {3, 5, 17}},       {{300, 1, 257}, {1, 3, 257}},
};

struct OpInfo {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
};
const OpInfo kOps[] = {
    {"add", add, [](double x, double y) { return x + y; }},
    {"sub", sub, [](double x, double y) { return x - y; }},
    {"mul", mul, [](double x, double y) { return x * y; }},
    {"div", div, [](double x, double y) { return x / y; }},
};

// Divisors kept away from 0 so that div's finite differences stay well conditioned.
Tensor operand(const Shape& s, uint64_t seed, bool divisor) {
  return divisor ? param(s, seed, 0.5f, 2.0f) : param(s, seed);
}

TEST(Elementwise, BinaryForwardMatchesDoubleReferenceForEveryBroadcastCase) {
  for (const OpInfo& op : kOps) {
    for (const BinaryCase& c : kCases) {
      Tensor a = operand(c.a, 1, false), b = operand(c.b, 2, true);
      Tensor y = op.fn(a, b);
      const Shape expected = broadcast_shape("test", c.a, c.b);
      ASSERT_EQ(y.shape(), expected) << op.name << " " << c.a.str() << " " << c.b.str();
      EXPECT_LT(relative_error(y.to_vector(), broadcast_reference(a, b, expected, op.ref)), 1e-6)
          << op.name << " " << c.a.str() << " " << c.b.str();
    }
  }
}

TEST(Elementwise, BinaryBackwardMatchesFiniteDifferencesForEveryBroadcastCase) {
  for (const OpInfo& op : kOps) {
    for (const BinaryCase& c : kCases) {
      if (Shape(c.a).numel() > 1000 || Shape(c.b).numel() > 1000) continue;  // big ones below
      auto fn = [&](const std::vector<Tensor>& in) { return op.fn(in[0], in[1]); };
      EXPECT_TRUE(gradients_match(fn, {operand(c.a, 3, false), operand(c.b, 4, true)}))
          << op.name << " " << c.a.str() << " " << c.b.str();
    }
  }
}

TEST(Elementwise, BiasGradientIsTheSumOverRowsOnLargeInputs) {
  // (300, 257) + (257): da = dy, db = column sums of dy (double reference).
  Tensor a = param({300, 257}, 5), b = param({257}, 6);
  Tensor dy = random_tensor({300, 257}, 7);
  add(a, b).backward(dy);
  EXPECT_EQ(a.grad().to_vector(), dy.to_vector());
  const std::vector<float> g = dy.to_vector();
  std::vector<double> ref(257, 0.0);
  for (int r = 0; r < 300; ++r)
    for (int c = 0; c < 257; ++c) ref[c] += g[r * 257 + c];
  EXPECT_LT(relative_error(b.grad().to_vector(), ref), 1e-5);
}

TEST(Elementwise, MulAndDivGradientsMatchAnalyticOnBroadcastLargeInputs) {
  // (300, 257) * (300, 1): da = dy * b, db = row sums of dy * a; and the same for div.
  Tensor a = param({300, 257}, 8), b = param({300, 1}, 9, 0.5f, 2.0f);
  Tensor dy = random_tensor({300, 257}, 10);
  mul(a, b).backward(dy);
  const std::vector<float> av = a.to_vector(), bv = b.to_vector(), g = dy.to_vector();
  std::vector<double> da(300 * 257), db(300, 0.0);
  for (int r = 0; r < 300; ++r)
    for (int c = 0; c < 257; ++c) {
      da[r * 257 + c] = double(g[r * 257 + c]) * bv[r];
      db[r] += double(g[r * 257 + c]) * av[r * 257 + c];
    }
  EXPECT_LT(relative_error(a.grad().to_vector(), da), 1e-6);
  EXPECT_LT(relative_error(b.grad().to_vector(), db), 1e-5);

  a.zero_grad();
  b.zero_grad();
  div(a, b).backward(dy);
  for (int r = 0; r < 300; ++r) {
    db[r] = 0;
    for (int c = 0; c < 257; ++c) {
      da[r * 257 + c] = double(g[r * 257 + c]) / bv[r];
      db[r] -= double(g[r * 257 + c]) * av[r * 257 + c] / (double(bv[r]) * bv[r]);
    }
  }
  EXPECT_LT(relative_error(a.grad().to_vector(), da), 1e-6);
  EXPECT_LT(relative_error(b.grad().to_vector(), db), 1e-5);
}

TEST(Elementwise, SameTensorOnBothSidesAccumulatesBothGradients) {
  Tensor x = param({7, 13}, 11);
  mul(x, x).backward(Tensor::ones({7, 13}));
  const std::vector<float> xv = x.to_vector(), g = x.grad().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2 * xv[i]);
}

TEST(Elementwise, ShapesThatDoNotBroadcastThrowNamingTheOpAndBothShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  testing::expect_error([&] { add(a, b); }, {"add", "(2, 3)", "(4)", "do not broadcast"});
  testing::expect_error([&] { div(Tensor::zeros({3, 5, 17}), Tensor::zeros({5, 16})); },
                        {"div", "(3, 5, 17)", "(5, 16)"});
  testing::expect_error([&] { broadcast_shape("mul", Shape{2, 3}, Shape{3, 3}); }, {"mul", "(2, 3)", "(3, 3)"});
}

struct UnaryInfo {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  float lo, hi;  // input range the reference is checked on
};

std::vector<UnaryInfo> unary_ops() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.1f, 5},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1f, 5},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -4, 4},
      {"scale", [](const Tensor& x) { return scale(x, -2.5f); }, [](double x) { return -2.5 * x; }, -3, 3},
      {"add_scalar", [](const Tensor& x) { return add_scalar(x, 0.75f); }, [](double x) { return x + 0.75; }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -6, 6},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, -6, 6},
      {"softplus", [](const Tensor& x) { return softplus(x); }, [](double x) { return std::log1p(std::exp(x)); },
       -6, 6},
  };
}

TEST(Elementwise, UnaryForwardMatchesDoubleReference) {
  for (const UnaryInfo& op : unary_ops()) {
    for (const Shape& s : {Shape{7, 13}, Shape{3, 5, 17}, Shape{300, 257}}) {
      Tensor x = random_tensor(s, 12, op.lo, op.hi);
      Tensor y = op.fn(x);
      ASSERT_EQ(y.shape(), s);
      std::vector<double> ref;
      for (float v : x.to_vector()) ref.push_back(op.ref(v));
      // Elementwise relative error, so that small outputs (exp(-5)) are checked too.
      const std::vector<float> got = y.to_vector();
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(got[i] - ref[i]) / std::max(std::fabs(ref[i]), 1e-30));
      EXPECT_LT(worst, 4e-7) << op.name << " " << s.str();
    }
  }
}

TEST(Elementwise, UnaryBackwardMatchesFiniteDifferences) {
  for (const UnaryInfo& op : unary_ops()) {
    Tensor x = param({3, 5, 17}, 13, op.lo, op.hi);
    if (std::string(op.name) == "relu") {  // keep inputs away from the kink at 0
      float* p = x.f32();
      for (int64_t i = 0; i < x.numel(); ++i) p[i] += p[i] >= 0 ? 0.05f : -0.05f;
    }
    auto fn = [&](const std::vector<Tensor>& in) { return op.fn(in[0]); };
    EXPECT_TRUE(gradients_match(fn, {x})) << op.name;
  }
}

TEST(Elementwise, UnaryBackwardMatchesAnalyticDerivativeOnLargeInputs) {
  Tensor x = param({300, 257}, 14, 0.2f, 3.0f);
  Tensor dy = random_tensor({300, 257}, 15);
  const std::vector<float> xv = x.to_vector(), g = dy.to_vector();
  struct Case {
    std::function<Tensor(const Tensor&)> fn;
    std::function<double(double)> deriv;
  };
  const std::vector<Case> cases = {
      {[](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }},
      {[](const Tensor& t) { return log(t); }, [](double v) { return 1 / v; }},
      {[](const Tensor& t) { return sqrt(t); }, [](double v) { return 0.5 / std::sqrt(v); }},
      {[](const Tensor& t) { return tanh(t); }, [](double v) { return 1 - std::tanh(v) * std::tanh(v); }},
      {[](const Tensor& t) { return sigmoid(t); },
       [](double v) { return std::exp(-v) / ((1 + std::exp(-v)) * (1 + std::exp(-v))); }},
      {[](const Tensor& t) { return silu(t); },
       [](double v) {
         const double s = 1 / (1 + std::exp(-v));
         return s * (1 + v * (1 - s));
       }},
      {[](const Tensor& t) { return softplus(t); }, [](double v) { return 1 / (1 + std::exp(-v)); }},
  };
  for (const Case& c : cases) {
    x.zero_grad();
    c.fn(x).backward(dy);
    std::vector<double> ref(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) ref[i] = g[i] * c.deriv(xv[i]);
    EXPECT_LT(relative_error(x.grad().to_vector(), ref), 1e-5);
  }
}

TEST(Elementwise, SpecialValuesPropagate) {
  Tensor x = Tensor::from_vector({-INFINITY, INFINITY, NAN, 0.0f, -100.0f, 100.0f}, {6});
  const std::vector<float> e = exp(x).to_vector();
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], INFINITY);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.0f);
  EXPECT_NEAR(e[4], std::exp(-100.0), 3e-45);  // a subnormal result: right to one subnormal step
  EXPECT_EQ(e[5], INFINITY);
  const std::vector<float> t = tanh(x).to_vector();
  EXPECT_EQ(t[0], -1.0f);
  EXPECT_EQ(t[1], 1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_TRUE(std::isnan(relu(x).to_vector()[2]));
}

TEST(Elementwise, OperatorsBuildTheSameGraph) {
  Tensor a = param({3, 4}, 16), b = param({4}, 17, 0.5f, 2.0f);
  Tensor y = sum_all((a + b) * b - a / b);
  y.backward();
  Tensor a2 = a.detach().clone().set_requires_grad(true), b2 = b.detach().clone().set_requires_grad(true);
  sum_all(sub(mul(add(a2, b2), b2), div(a2, b2))).backward();
  EXPECT_EQ(a.grad().to_vector(), a2.grad().to_vector());
  EXPECT_EQ(b.grad().to_vector(), b2.grad().to_vector());
}

}  // namespace
}  // namespace tarn
