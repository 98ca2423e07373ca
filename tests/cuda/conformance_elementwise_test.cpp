// CUDA elementwise and reduction kernels against the CPU kernels, on shapes that are no
// multiple of any tile (37 rows, 129 columns), under every emulated thread order and on a GPU
// when there is one.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

using kernels::cpu::Binary;
using kernels::cpu::Unary;

constexpr int64_t kRows = 37, kCols = 129;
constexpr Binary kBinaryOps[] = {Binary::add, Binary::sub, Binary::mul, Binary::div};

class ElementwiseConformance : public Conformance {};

// One side's evaluation of op (kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu: the
// same formula, each function from its own library) and of its derivative
// (kernels/unary_backward.h, shared) on x, the CPU's y and dy, with the side's error bound.
Bounded UnaryForward(Unary op, const Bounded& x, float s) {
  switch (op) {
    case Unary::neg: return -x;
    case Unary::exp: return Exp(x);
    case Unary::log: return Log(x);
    case Unary::sqrt: return Sqrt(x);
    case Unary::relu: return x.v > 0 ? x : Exact(*x.r, 0.0);
    case Unary::tanh: return Tanh(x);
    case Unary::scale: return x * s;
    case Unary::add_scalar: return x + s;
    case Unary::sigmoid: return 1.0 / (1.0 + Exp(-x));
    case Unary::silu: return x / (1.0 + Exp(-x));
    // max(x, 0) + log1p(e^-|x|): log1p as accurate as log (1 ulp each side).
    case Unary::softplus: return (x.v > 0 ? x : Exact(*x.r, 0.0)) + Log(1.0 + Exp(x.v > 0 ? -x : x));
  }
  return x;
}

Bounded UnaryBackward(Unary op, const Bounded& x, const Bounded& y, const Bounded& dy, float s) {
  switch (op) {
    case Unary::neg: return -dy;
    case Unary::exp: return dy * y;
    case Unary::log: return dy / x;
    case Unary::sqrt: return dy * 0.5 / y;
    case Unary::relu: return y.v > 0 ? dy : Exact(*dy.r, 0.0);
    case Unary::tanh: return dy * (1.0 - y * y);
    case Unary::scale: return dy * s;
    case Unary::add_scalar: return dy;
    case Unary::sigmoid: return dy * y * (1.0 - y);
    case Unary::silu: {
      const Bounded sig = 1.0 / (1.0 + Exp(-x));
      return dy * sig * (1.0 + x * (1.0 - sig));
    }
    case Unary::softplus: return dy / (1.0 + Exp(-x));
  }
  return dy;
}

TEST_P(ElementwiseConformance, BinarySameShapeMatchesCpu) {
  const int64_t n = kRows * kCols;
  const auto a = Random(n, -2.0f, 2.0f, 1);
  auto b = Random(n, 0.5f, 3.0f, 2);  // away from 0 for div
  auto da = dev(a), db = dev(b);
  for (Binary op : kBinaryOps) {
    std::vector<float> want(n);
    kernels::cpu::binary(op, a.data(), b.data(), want.data(), n);
    auto got = out(n);
    TARN_ON(target(), binary, op, da.get(), db.get(), got.get(), n);
    EXPECT_TRUE(BitwiseEqual(got.host(), want)) << "op " << static_cast<int>(op);
  }
}

TEST_P(ElementwiseConformance, BinaryRowIsTheBiasAdd) {
  const auto a = Random(kRows * kCols, -2.0f, 2.0f, 3);
  const auto b = Random(kCols, 0.5f, 3.0f, 4);
  auto da = dev(a), db = dev(b);
  for (Binary op : kBinaryOps) {
    std::vector<float> want(a.size());
    kernels::cpu::binary_row(op, a.data(), b.data(), want.data(), kRows, kCols);
    auto got = out(a.size());
    TARN_ON(target(), binary_row, op, da.get(), db.get(), got.get(), kRows, kCols);
    EXPECT_TRUE(BitwiseEqual(got.host(), want)) << "op " << static_cast<int>(op);
  }
}

TEST_P(ElementwiseConformance, BinaryBroadcastHandlesStretchedAxesOnEitherSide) {
  // out (3, 37, 129). Cases: b (37, 1) stretched over batch and columns; a (3, 1, 129)
  // stretched over rows; b (129) -> the merged bias case; both full -> the same-shape case.
  const int64_t shape[3] = {3, kRows, kCols};
  const int64_t full[3] = {kRows * kCols, kCols, 1};
  struct Case {
    int64_t a_strides[3], b_strides[3];
    int64_t a_size, b_size;
  };
  const Case cases[] = {
      {{full[0], full[1], full[2]}, {0, 1, 0}, 3 * kRows * kCols, kRows},
      {{kCols, 0, 1}, {full[0], full[1], full[2]}, 3 * kCols, 3 * kRows * kCols},
      {{full[0], full[1], full[2]}, {0, 0, 1}, 3 * kRows * kCols, kCols},
      {{full[0], full[1], full[2]}, {full[0], full[1], full[2]}, 3 * kRows * kCols, 3 * kRows * kCols},
  };
  const int64_t n = 3 * kRows * kCols;
  int index = 0;
  for (const Case& c : cases) {
    const auto a = Random(c.a_size, -2.0f, 2.0f, 10 + index);
    const auto b = Random(c.b_size, 0.5f, 3.0f, 20 + index);
    auto da = dev(a), db = dev(b);
    for (Binary op : kBinaryOps) {
      std::vector<float> want(n);
      kernels::cpu::binary_broadcast(op, a.data(), c.a_strides, b.data(), c.b_strides, want.data(), shape, 3);
      auto got = out(n);
      TARN_ON(target(), binary_broadcast, op, da.get(), c.a_strides, db.get(), c.b_strides, got.get(), shape, 3);
      EXPECT_TRUE(BitwiseEqual(got.host(), want)) << "case " << index << " op " << static_cast<int>(op);
    }
    ++index;
  }
}

TEST_P(ElementwiseConformance, UnaryForwardAndBackwardMatchCpu) {
  const int64_t n = kRows * kCols;
  const Unary ops[] = {Unary::neg,   Unary::exp,        Unary::log,     Unary::sqrt,
                       Unary::relu,  Unary::tanh,       Unary::scale,   Unary::add_scalar,
                       Unary::sigmoid, Unary::silu,     Unary::softplus};
  const auto dy = Random(n, -1.0f, 1.0f, 31);
  auto ddy = dev(dy);
  for (Unary op : ops) {
    const bool positive = op == Unary::log || op == Unary::sqrt;
    const auto x = Random(n, positive ? 0.1f : -4.0f, 4.0f, 30);
    const float s = 0.75f;
    std::vector<float> want_y(n), want_dx(n);
    kernels::cpu::unary(op, x.data(), want_y.data(), n, s);
    kernels::cpu::unary_backward(op, x.data(), want_y.data(), dy.data(), want_dx.data(), n, s);
    auto dx_in = dev(x);
    auto y = out(n);
    TARN_ON(target(), unary, op, dx_in.get(), y.get(), n, s);
    const auto got_y = y.host();
    // Each element within the device's and the CPU's running error bounds: their functions'
    // ulps (expf 2, logf 1, tanhf 2; the CPU's exp 2.5 * 2^-24, tanh 3 * 2^-24, logf 1 ulp) and
    // a rounding per operation (sqrt, x * s, x + s, and the derivatives' products).
    std::vector<double> bound_y(n), bound_dx(n);
    for (int64_t i = 0; i < n; ++i) {
      for (const Rounding* side : {&kCudaF32, &kCpuF32}) {
        const Bounded xi = Exact(*side, x[i]);
        bound_y[i] += UnaryForward(op, xi, s).err;
        bound_dx[i] += UnaryBackward(op, xi, Exact(*side, want_y[i]), Exact(*side, dy[i]), s).err;
      }
    }
    EXPECT_TRUE(WithinBound(got_y, want_y, bound_y)) << "forward op " << static_cast<int>(op);
    // The backward reads the CPU's y, so that only the derivative is compared.
    auto dy_ref = dev(want_y);
    auto dx = out(n);
    TARN_ON(target(), unary_backward, op, dx_in.get(), dy_ref.get(), ddy.get(), dx.get(), n, s);
    EXPECT_TRUE(WithinBound(dx.host(), want_dx, bound_dx)) << "backward op " << static_cast<int>(op);
  }
}

TEST_P(ElementwiseConformance, SumAxisMatchesCpuForRowsColumnsAndLongMiddleAxes) {
  struct Case {
    int64_t outer, n, inner;
    float alpha;
  };
  // Rows (inner 1); columns; a long middle axis that is split into chunks; a 1-element axis.
  const Case cases[] = {{kRows, kCols, 1, 1.0f}, {5, kRows, kCols, 0.5f}, {1, 1000, 3, 1.0f},
                        {2, 700, 129, 2.0f},     {kRows, 1, kCols, 1.0f}, {1, 5000, 1, 1.0f}};
  int index = 0;
  for (const Case& c : cases) {
    const auto x = Random(c.outer * c.n * c.inner, -1.0f, 1.0f, 40 + index);
    std::vector<float> want(c.outer * c.inner);
    kernels::cpu::sum_axis(x.data(), want.data(), c.outer, c.n, c.inner, c.alpha);
    auto dx = dev(x);
    auto got = out(want.size());
    TARN_ON(target(), sum_axis, dx.get(), got.get(), c.outer, c.n, c.inner, c.alpha);
    // Each side sums n terms in f32 in its own order (gamma_{n-1} sum |x|), then scales by
    // alpha (one rounding).
    std::vector<double> bound(want.size());
    for (int64_t o = 0; o < c.outer; ++o)
      for (int64_t in = 0; in < c.inner; ++in) {
        double l1 = 0.0;
        for (int64_t k = 0; k < c.n; ++k) l1 += std::fabs(x[(o * c.n + k) * c.inner + in]);
        bound[o * c.inner + in] = 2 * (Gamma(c.n - 1, kF32) * l1 + kF32 * l1) * std::fabs(c.alpha);
      }
    EXPECT_TRUE(WithinBound(got.host(), want, bound)) << "case " << index;
    ++index;
  }
}

TEST_P(ElementwiseConformance, SumAllMatchesCpu) {
  for (int64_t n : {int64_t{1}, kRows * kCols, int64_t{100003}}) {
    const auto x = Random(n, -1.0f, 1.0f, 50);
    const double want = kernels::cpu::sum_all(x.data(), n);
    double exact = 0.0, l1 = 0.0;
    for (float v : x) {
      exact += v;
      l1 += std::fabs(v);
    }
    auto dx = dev(x);
    const double got = TARN_ON(target(), sum_all, dx.get(), n);
    // The CUDA kernel accumulates in double, in any order, as does this loop: each within
    // gamma_{n-1}(2^-53) sum |x| of the sum. The CPU sums blocks of 2048 in f32
    // (kernels/cpu/reduce.cpp's kSumBlock: gamma_2047(2^-24) sum |x|), combined in double.
    const double device = Gamma(n - 1, kF64) * l1;
    EXPECT_TRUE(WithinBound(got, exact, 2 * device)) << "n " << n;
    EXPECT_TRUE(WithinBound(got, want, 2 * device + Gamma(std::min<int64_t>(n, 2048) - 1, kF32) * l1)) << "n " << n;
  }
}

TEST_P(ElementwiseConformance, BroadcastAxisIsTheBackwardOfSumAxis) {
  const int64_t outer = 3, n = kRows, inner = kCols;
  const auto dy = Random(outer * inner, -1.0f, 1.0f, 60);
  std::vector<float> want(outer * n * inner);
  kernels::cpu::broadcast_axis(dy.data(), want.data(), outer, n, inner, 0.25f);
  auto ddy = dev(dy);
  auto got = out(want.size());
  TARN_ON(target(), broadcast_axis, ddy.get(), got.get(), outer, n, inner, 0.25f);
  EXPECT_TRUE(BitwiseEqual(got.host(), want));
}

INSTANTIATE_TEST_SUITE_P(Targets, ElementwiseConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
