#pragma once
// Tolerances of the GPU tests, derived from the precision a kernel computes in, not tuned to
// what the emulator produces. The emulator is more accurate than hardware (its tensor-core
// mma sums in f32 in a fixed order, its cuBLAS stand-in sums in double, its expf is glibc's),
// so a bound tuned there can fail on a GPU without a bug. Every bound here is a worst case
// for the hardware's arithmetic (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
// ed., chapters 2-4), so that a test that fails on a GPU means a bug:
//   - a rounding moves a value by at most u times itself (u below: the unit roundoff);
//   - a sum or dot product of n terms, in any order or tree (parallel reductions, split-K,
//     FMA contraction or not), is within gamma_n(u) sum |term| of the exact one (Gamma);
//   - a math function is within its documented ulps (Ulps, kCuda*, kCpu*).
// A test adds the device's error and the CPU reference's, since both differ from the exact
// value: |got - want| <= |got - exact| + |exact - want|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace tarn::cuda_testing {

// ---- Unit roundoffs ----
// An f32 add, multiply or FMA on CUDA cores or the CPU: IEEE round to nearest (FMA contraction
// only removes roundings).
constexpr double kF32 = 0x1p-24;
// f32 accumulation inside a tensor-core MMA (wmma, cuBLAS' bf16 and tf32 GEMMs): not IEEE
// round to nearest; modelled as truncation, a full ulp per add.
constexpr double kF32TensorCore = 0x1p-23;
// An f32 operand rounded to tf32 (10 explicit mantissa bits), only with TARN_ALLOW_TF32=1.
constexpr double kTf32 = 0x1p-11;
// A value rounded to bf16 (7 explicit mantissa bits), round to nearest even.
constexpr double kBf16 = 0x1p-8;
// A double add or multiply (reductions that accumulate in double).
constexpr double kF64 = 0x1p-53;

// ---- Math functions ----
// n ulps of an f32 result as a relative error (an ulp of a normal x is at most 2^-23 |x|).
constexpr double Ulps(double n) { return n * 0x1p-23; }

// How one implementation rounds: its arithmetic and its math functions. Each test sums the
// device's and the CPU reference's bounds (kCudaF32, kCpuF32, or a variant of them).
struct Rounding {
  double u;             // f32 arithmetic (kF32; kF32TensorCore where sums run on tensor cores)
  double exp, log;      // relative error of exp and log
  double operand = 0;   // intermediate values rounded before a product takes them (bf16: kBf16)
  double store = 0;     // outputs rounded when stored (bf16: kBf16)
  double tanh = 0;      // relative error of tanh
  double erf_abs = 0;   // absolute error of erf
  double sin = 0;       // relative error of sin
};

// CUDA's single-precision functions as the kernels call them, without fast math (the CUDA C++
// Programming Guide's table of maximum ulp errors): expf 2, logf 1, tanhf 2, erff 2 (at most
// 2^-23 absolute, |erf| < 1), sinf 2; x / y and sqrtf are IEEE (the -prec-div and -prec-sqrt
// defaults). No kernel calls the fast intrinsics (__expf: 2 + floor(|1.173 x|) ulps).
constexpr Rounding kCudaF32{kF32, Ulps(2), Ulps(1), 0, 0, Ulps(2), 0x1p-23, Ulps(2)};
// The same functions with the products on tensor cores, bf16 operands and outputs (the bf16
// kernels).
constexpr Rounding kCudaBf16{kF32TensorCore, Ulps(2), Ulps(1), kBf16, kBf16, Ulps(2), 0x1p-23, Ulps(2)};
// The CPU kernels' functions: exp, tanh and erf of kernels/cpu/elementwise_math.h as
// tests/ops/elementwise_math_test.cpp bounds them (2.5 * 2^-24 and 3 * 2^-24 relative, 6 * 2^-24
// absolute); glibc's logf and sinf within 1 ulp (the glibc manual's table of known errors).
constexpr Rounding kCpuF32{kF32, 2.5 * 0x1p-24, Ulps(1), 0, 0, 3 * 0x1p-24, 6 * 0x1p-24, Ulps(1)};

// The relative error of one side's exp where the exact result is y > 0: its ulps, or, below
// the smallest normal f32 (2^-126), all of y (flushed to 0) plus two steps of the subnormals'
// spacing 2^-149 (the function's ulps, absolute there).
inline double ExpError(const Rounding& r, double y) { return y < 0x1p-126 ? 1.0 + 0x1p-148 / y : r.exp; }

// gamma_n(u) = n u / (1 - n u) (Higham, Lemma 3.1): a value that went through n roundings
// (each a factor 1 + delta, |delta| <= u) is within gamma_n(u) of itself relative. So a dot
// product of n terms is within gamma_n(u) sum |x_k y_k| of the exact one, and a sum of n terms
// within gamma_{n-1}(u) sum |x_k|, whatever the order (Higham, eq. 3.5 and section 4.2).
inline double Gamma(int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  TARN_CHECK(nu < 0.5, "Gamma: n u = ", nu, " too large for a first-order bound");
  return nu / (1.0 - nu);
}

// ---- Running error bounds ----
// A formula's exact value (in double) with a bound on how far one implementation's f32
// evaluation of it can be (Higham's running error analysis, section 3.3): each operation adds
// its own rounding, u |result| (or its function's error), to its operands' bounds carried
// through it; worst case, to first order, plus the products of two bounds. A test writes a
// kernel's formula once with these and evaluates it for the device's Rounding and the CPU's.
struct Bounded {
  double v = 0, err = 0;
  const Rounding* r = nullptr;
};

// An input both sides read exactly.
inline Bounded Exact(const Rounding& r, double v) { return {v, 0.0, &r}; }

namespace bounded {
inline const Rounding& Of(const Bounded& a, const Bounded& b) { return a.r ? *a.r : *b.r; }
inline Bounded Rounded(const Rounding& r, double v, double err) { return {v, err + r.u * (std::fabs(v) + err), &r}; }
}  // namespace bounded

// Constants (floats both sides hold exactly) mix in as exact values.
inline Bounded operator+(const Bounded& a, const Bounded& b) {
  return bounded::Rounded(bounded::Of(a, b), a.v + b.v, a.err + b.err);
}
inline Bounded operator-(const Bounded& a, const Bounded& b) {
  return bounded::Rounded(bounded::Of(a, b), a.v - b.v, a.err + b.err);
}
inline Bounded operator*(const Bounded& a, const Bounded& b) {
  return bounded::Rounded(bounded::Of(a, b), a.v * b.v,
                          std::fabs(a.v) * b.err + std::fabs(b.v) * a.err + a.err * b.err);
}
inline Bounded operator/(const Bounded& a, const Bounded& b) {
  const double q = a.v / b.v, room = std::fabs(b.v) - b.err;
  return bounded::Rounded(bounded::Of(a, b), q, room > 0 ? (a.err + std::fabs(q) * b.err) / room : INFINITY);
}
inline Bounded operator-(const Bounded& a) { return {-a.v, a.err, a.r}; }
inline Bounded operator+(const Bounded& a, double c) { return a + Bounded{c, 0.0, a.r}; }
inline Bounded operator+(double c, const Bounded& a) { return Bounded{c, 0.0, a.r} + a; }
inline Bounded operator-(const Bounded& a, double c) { return a - Bounded{c, 0.0, a.r}; }
inline Bounded operator-(double c, const Bounded& a) { return Bounded{c, 0.0, a.r} - a; }
inline Bounded operator*(const Bounded& a, double c) { return a * Bounded{c, 0.0, a.r}; }
inline Bounded operator*(double c, const Bounded& a) { return Bounded{c, 0.0, a.r} * a; }
inline Bounded operator/(const Bounded& a, double c) { return a / Bounded{c, 0.0, a.r}; }
inline Bounded operator/(double c, const Bounded& a) { return Bounded{c, 0.0, a.r} / a; }

// The functions: the argument's bound through the function's steepest slope over the
// argument's interval, plus the function's own error (Rounding) on the result.
inline Bounded Exp(const Bounded& a) {
  const double y = std::exp(a.v), through = y * std::expm1(a.err);
  return {y, through + (y > 0 ? ExpError(*a.r, y) * (y + through) : 0x1p-148), a.r};
}
inline Bounded Log(const Bounded& a) {
  const double y = std::log(a.v), room = a.v - a.err;
  const double through = room > 0 ? std::log(a.v / room) : INFINITY;
  return {y, through + a.r->log * (std::fabs(y) + through), a.r};
}
inline Bounded Sqrt(const Bounded& a) {  // IEEE: one rounding
  const double y = std::sqrt(a.v), room = std::max(0.0, a.v - a.err);
  return bounded::Rounded(*a.r, y, y - std::sqrt(room));
}
inline Bounded Tanh(const Bounded& a) {
  const double y = std::tanh(a.v), t = std::tanh(std::max(0.0, std::fabs(a.v) - a.err));
  const double through = (1 - t * t) * a.err;
  return {y, through + a.r->tanh * (std::fabs(y) + through), a.r};
}
inline Bounded Erf(const Bounded& a) {
  const double x = std::max(0.0, std::fabs(a.v) - a.err);
  return {std::erf(a.v), 2 / std::sqrt(M_PI) * std::exp(-x * x) * a.err + a.r->erf_abs, a.r};
}
inline Bounded Sin(const Bounded& a) {
  const double y = std::sin(a.v), through = std::min(1.0, a.err);
  return {y, through + a.r->sin * (std::fabs(y) + through), a.r};
}

// A sum of n terms in any order: their bounds plus gamma_{n-1} of the terms' magnitudes.
inline Bounded Sum(const std::vector<Bounded>& terms) {
  TARN_CHECK(!terms.empty() && terms[0].r, "Sum: no terms");
  double v = 0, err = 0, mag = 0;
  for (const Bounded& t : terms) v += t.v, err += t.err, mag += std::fabs(t.v) + t.err;
  return {v, err + Gamma(static_cast<int64_t>(terms.size()) - 1, terms[0].r->u) * mag, terms[0].r};
}

// The error bounds of values computed with Bounded, as a bound vector.
inline std::vector<double> Errors(const std::vector<Bounded>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i].err;
  return out;
}

// Whether cuBLAS may round f32 GEMM operands to tf32 (kernels/cuda/gemm.cu reads the same
// variable): the GPU target's f32 GEMM bounds then add 2 kTf32 per product.
inline bool Tf32Allowed() {
  const char* v = std::getenv("TARN_ALLOW_TF32");
  return v && *v != '\0' && std::strcmp(v, "0") != 0;
}

// ---- Magnitudes ----
// sum_k |a_ik| |b_kj|, in double: the magnitude a GEMM's rounding error is relative to. A is
// M x K (K x M when ta), B is K x N (N x K when tb), row-major; the result is M x N.
inline std::vector<double> AbsProduct(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a,
                                      const float* b) {
  std::vector<double> out(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double aik = std::fabs(ta ? a[k * M + i] : a[i * K + k]);
      for (int64_t j = 0; j < N; ++j) out[i * N + j] += aik * std::fabs(tb ? b[j * K + k] : b[k * N + j]);
    }
  return out;
}

// rel * magnitude[i] + abs, elementwise.
inline std::vector<double> Scaled(const std::vector<double>& magnitude, double rel, double abs = 0.0) {
  std::vector<double> out(magnitude.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = rel * magnitude[i] + abs;
  return out;
}

// |x[i]| in double.
inline std::vector<double> Abs(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = std::fabs(static_cast<double>(x[i]));
  return out;
}

// a[i] + b[i].
inline std::vector<double> Plus(std::vector<double> a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] += b[i];
  return a;
}

// ---- Checks ----
// With TARN_TEST_MARGINS=1 in the environment every check below prints its worst
// |error| / bound (on a GPU: how close the hardware comes to the derivation).
inline void ReportMargin(double worst, size_t n) {
  if (const char* m = std::getenv("TARN_TEST_MARGINS"); m && *m == '1')
    std::cout << "  [margin] worst |error| / bound = " << worst << " over " << n << " elements\n";
}

// Every |got[i] - want[i]| <= bound[i] (NaN only where want is NaN, infinities equal). On
// failure names the count and the first few elements with their bounds.
inline ::testing::AssertionResult WithinBound(const std::vector<float>& got, const std::vector<float>& want,
                                              const std::vector<double>& bound) {
  if (got.size() != want.size() || got.size() != bound.size())
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want " << want.size()
                                         << ", bound " << bound.size();
  size_t bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    if (std::isnan(g) || std::isnan(w)) {
      ok = std::isnan(g) && std::isnan(w);
    } else if (std::isinf(g) || std::isinf(w)) {
      ok = g == w;
    } else {
      const double err = std::fabs(g - w);
      ok = err <= bound[i];
      if (err > 0) worst = std::max(worst, bound[i] > 0 ? err / bound[i] : INFINITY);
    }
    if (!ok) {
      if (bad < 5)
        first << "  [" << i << "] got " << g << ", want " << w << ", |error| " << std::fabs(g - w) << " > bound "
              << bound[i] << "\n";
      ++bad;
    }
  }
  ReportMargin(worst, got.size());
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements beyond their bound (worst "
                                       << worst << " x its bound), first:\n"
                                       << first.str();
}

// One value within its bound.
inline ::testing::AssertionResult WithinBound(double got, double want, double bound) {
  const double err = std::fabs(got - want);
  ReportMargin(err > 0 ? err / bound : 0.0, 1);
  if (err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want << ", |error| " << err << " > bound "
                                       << bound;
}

}  // namespace tarn::cuda_testing
