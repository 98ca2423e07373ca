// bf16 mixed precision in the matrix products (framework/precision.h): the kernels
// (kernels/gemm.h gemm_batched_bf16, kernels/cast.h) and the matmul / linear ops with
// Precision::bf16, forward and backward, against f32.
//
// The bound the ops must meet follows from bf16's 8-bit significand: rounding to bf16 moves a
// value by at most u = 2^-9 of itself, so a product of two rounded values is off by at most
// (2u + u^2)|a||b|, and a sum of K of them by that times sum_k |a_k||b_k|, plus the f32
// accumulation's K * 2^-24 of the same sum (twice: the f32 result compared with carries its own).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "framework/ops/matmul.h"
#include "framework/precision.h"
#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {
using testing::random_tensor;

std::vector<float> rounded_random(size_t n, uint64_t seed) {
  std::vector<float> v = random_tensor(Shape{static_cast<int64_t>(n)}, seed).to_vector();
  for (float& x : v) x = bf16_round(x);
  return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_from_float(v[i]);
  return out;
}

TEST(Bf16Cast, RoundsToNearestEvenAndKeepsSpecialsAsTheScalarReferenceDoes) {
  std::vector<float> x = random_tensor(Shape{100000}, 3, -1e4f, 1e4f).to_vector();  // several threads' chunks
  const float specials[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f, 1e-40f, 3.39e38f, 3.4028235e38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  x.insert(x.begin(), std::begin(specials), std::end(specials));
  std::vector<bf16> y(x.size());
  kernels::cpu::cast_to_bf16(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i].bits, bf16_from_float(x[i]).bits) << "x = " << x[i];
  EXPECT_EQ(y[0].bits, bf16_from_float(1.0f).bits);                // a tie goes to the even neighbour
  EXPECT_EQ(y[1].bits, bf16_from_float(1.0f + 4.0f / 256).bits);   // ... up as well as down
  EXPECT_TRUE(std::isinf(bf16_to_float(y[5])));                    // past the largest bf16
  EXPECT_TRUE(std::isnan(bf16_to_float(y[8])) && std::isnan(bf16_to_float(y[9])));
  std::vector<float> back(x.size());
  kernels::cpu::cast_from_bf16(y.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) ASSERT_EQ(back[i], bf16_to_float(y[i]));
}

// On bf16 values the mixed-precision GEMM must equal the f32 GEMM of the same values (each
// product is exact in f32; only the accumulation order differs), in every layout the ops use.
TEST(Bf16Gemm, EqualsTheF32GemmOfTheSameBf16ValuesInEveryLayout) {
  struct Case {
    bool ta, tb, share_a, share_b, accumulate;
    float alpha, beta;
    int64_t batch, M, N, K;
  };
  const Case cases[] = {
      {false, false, false, false, false, 1.0f, 0.0f, 1, 300, 257, 1000},  // one large product
      {false, true, false, false, false, 1.0f, 1.0f, 1, 64, 48, 32},       // linear with a bias in C
      {true, false, false, false, false, 1.0f, 0.0f, 1, 48, 32, 640},      // a weight gradient
      {true, true, false, false, false, 0.5f, 0.25f, 3, 17, 19, 23},
      {false, false, false, true, false, 1.0f, 0.0f, 4, 9, 40, 33},        // a shared right operand
      {false, true, true, false, false, 1.0f, 0.0f, 4, 9, 40, 33},         // a shared left operand
      {true, false, false, false, true, 1.0f, 0.0f, 5, 12, 14, 16},        // every product into one C
  };
  int index = 0;
  for (const Case& c : cases) {
    const int64_t sa = c.share_a ? 0 : c.M * c.K, sb = c.share_b ? 0 : c.K * c.N, sc = c.accumulate ? 0 : c.M * c.N;
    const auto a = rounded_random(static_cast<size_t>((c.share_a ? 1 : c.batch) * c.M * c.K), 10 + index);
    const auto b = rounded_random(static_cast<size_t>((c.share_b ? 1 : c.batch) * c.K * c.N), 20 + index);
    const auto c0 = random_tensor(Shape{(c.accumulate ? 1 : c.batch) * c.M * c.N}, 30 + index).to_vector();
    std::vector<float> want = c0, got = c0;
    kernels::cpu::gemm_batched(c.ta, c.tb, c.batch, c.M, c.N, c.K, c.alpha, a.data(), sa, b.data(), sb, c.beta,
                               want.data(), sc);
    const auto ab = to_bf16(a), bb = to_bf16(b);
    kernels::cpu::gemm_batched_bf16(c.ta, c.tb, c.batch, c.M, c.N, c.K, c.alpha, ab.data(), sa, bb.data(), sb,
                                    c.beta, got.data(), sc);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    EXPECT_LT(worst, 2e-4 * std::sqrt(double(c.K * (c.accumulate ? c.batch : 1)))) << "case " << index;
    ++index;
  }
}

TEST(Bf16Gemm, TheEngineSaysWhatMultipliesAndWhyNot) {
  const kernels::cpu::Bf16GemmEngine e = bf16_gemm_engine(Device::cpu());
  EXPECT_FALSE(e.description.empty());
  if (e.native) EXPECT_NE(e.description.find("oneDNN"), std::string::npos) << e.description;
}

// |a| (values made non-negative), for the bound's sum_k |a_k||b_k| through the f32 op itself.
Tensor magnitude(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = std::abs(x);
  return Tensor::from_vector(v, t.shape());
}

// Checks |got - want| <= (2^-8 (1 + 2^-10) + 2 K 2^-24) bound + tiny, elementwise.
void expect_within_bf16_bound(const Tensor& got, const Tensor& want, const Tensor& bound, int64_t K,
                              const char* what) {
  const std::vector<float> g = got.to_vector(), w = want.to_vector(), b = bound.to_vector();
  ASSERT_EQ(g.size(), w.size());
  const double factor = std::ldexp(1.0, -8) * (1 + std::ldexp(1.0, -10)) + 2.0 * K * std::ldexp(1.0, -24);
  double worst_ratio = 0;
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(double(g[i]) - w[i]), allowed = factor * b[i] + 1e-30;
    worst_ratio = std::max(worst_ratio, err / allowed);
    if (err > allowed) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << g.size() << " elements past the bound (worst "
                     << worst_ratio << "x it)";
  // And bf16 must actually have rounded something: the bound is not met by doing f32.
  EXPECT_GT(worst_ratio, 1e-3) << what << ": no visible bf16 rounding";
}

struct OpRun {
  Tensor y, dx, dw, db;
};

OpRun run_linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, Precision p) {
  Tensor xl = x.clone(), wl = w.clone(), bl = b.clone();
  xl.set_requires_grad(true);
  wl.set_requires_grad(true);
  bl.set_requires_grad(true);
  Tensor y = linear(xl, wl, bl, p);
  y.backward(dy);
  return {y.detach(), xl.grad(), wl.grad(), bl.grad()};
}

TEST(Bf16Linear, ForwardAndGradientsStayWithinTheBf16BoundOfF32) {
  const int64_t rows = 96, in = 80, out = 72;
  const Tensor x = random_tensor({4, rows / 4, in}, 1), w = random_tensor({out, in}, 2), b = random_tensor({out}, 3);
  const Tensor dy = random_tensor({4, rows / 4, out}, 4);
  const OpRun f = run_linear(x, w, b, dy, Precision::f32);
  const OpRun h = run_linear(x, w, b, dy, Precision::bf16);
  // The bounds: the same products on magnitudes (the bias adds exactly in both).
  const OpRun m = run_linear(magnitude(x), magnitude(w), Tensor::zeros({out}), magnitude(dy), Precision::f32);
  expect_within_bf16_bound(h.y, f.y, m.y, in, "y");
  expect_within_bf16_bound(h.dx, f.dx, m.dx, out, "dx");
  expect_within_bf16_bound(h.dw, f.dw, m.dw, rows, "dW");
  EXPECT_EQ(h.db.to_vector(), f.db.to_vector()) << "the bias gradient is an f32 sum in both";
}

TEST(Bf16Matmul, EveryTransposeAndASharedOperandStayWithinTheBf16Bound) {
  const int64_t batch = 3, M = 20, N = 24, K = 40;
  int seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool shared_b : {false, true}) {
        const Tensor a = random_tensor(ta ? Shape{batch, K, M} : Shape{batch, M, K}, ++seed);
        const Shape bs = shared_b ? (tb ? Shape{N, K} : Shape{K, N}) : (tb ? Shape{batch, N, K} : Shape{batch, K, N});
        const Tensor b = random_tensor(bs, ++seed), dc = random_tensor({batch, M, N}, ++seed);
        auto run = [&](const Tensor& av, const Tensor& bv, const Tensor& dcv, Precision p) {
          Tensor al = av.clone(), bl = bv.clone();
          al.set_requires_grad(true);
          bl.set_requires_grad(true);
          Tensor c = matmul(al, bl, ta, tb, p);
          c.backward(dcv);
          return std::vector<Tensor>{c.detach(), al.grad(), bl.grad()};
        };
        const auto f = run(a, b, dc, Precision::f32), h = run(a, b, dc, Precision::bf16);
        const auto m = run(magnitude(a), magnitude(b), magnitude(dc), Precision::f32);
        SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " shared_b " << shared_b);
        expect_within_bf16_bound(h[0], f[0], m[0], K, "c");
        expect_within_bf16_bound(h[1], f[1], m[1], N, "da");
        expect_within_bf16_bound(h[2], f[2], m[2], shared_b ? batch * M : M, "db");
      }
}

}  // namespace
}  // namespace tarn
