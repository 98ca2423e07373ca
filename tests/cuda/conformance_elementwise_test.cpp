// CUDA elementwise and reduction kernels against the CPU kernels, on shapes that are no
// multiple of any tile (37 rows, 129 columns), under every emulated thread order and on a GPU
// when there is one.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

using kernels::cpu::Binary;
using kernels::cpu::Unary;

constexpr int64_t kRows = 37, kCols = 129;
constexpr Binary kBinaryOps[] = {Binary::add, Binary::sub, Binary::mul, Binary::div};

class ElementwiseConformance : public Conformance {};

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
  const Unary ops[] = {Unary::neg, Unary::exp,  Unary::log,   Unary::sqrt,
                       Unary::relu, Unary::tanh, Unary::scale, Unary::add_scalar};
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
    EXPECT_TRUE(AllClose(got_y, want_y, kRtol, kAtol)) << "forward op " << static_cast<int>(op);
    // The backward reads the CPU's y, so that only the derivative is compared.
    auto dy_ref = dev(want_y);
    auto dx = out(n);
    TARN_ON(target(), unary_backward, op, dx_in.get(), dy_ref.get(), ddy.get(), dx.get(), n, s);
    EXPECT_TRUE(AllClose(dx.host(), want_dx, kRtol, kAtol)) << "backward op " << static_cast<int>(op);
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
    EXPECT_TRUE(AllClose(got.host(), want, 1e-5f, 1e-5f)) << "case " << index;
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
    // The CUDA kernel accumulates in double; the CPU's blocks in f32, whose error grows with
    // the block length times eps times sum |x| (and depends on how the loop was vectorised).
    EXPECT_NEAR(got, exact, 1e-12 * l1) << "n " << n;
    EXPECT_NEAR(got, want, 1e-6 * l1) << "n " << n;
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
