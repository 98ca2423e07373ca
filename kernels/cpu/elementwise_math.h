#pragma once
// Vectorisable float exp, tanh and erf for the CPU kernels (private to kernels/cpu).
//
// Why not std::exp: glibc only exposes its SIMD variants under -ffast-math, so a loop calling
// std::exp stays scalar (~5x slower than a memory-bound pass). These are branch-free, so
// `#pragma omp simd` loops calling them vectorise. Every choice between two values goes through
// select(), a bit-mask blend: GCC (with the default -ftrapping-math and without AVX-512 masks)
// refuses to if-convert `c ? a : b` once it has sunk a's or b's arithmetic into the branch, and
// then the whole loop stays scalar ("control flow in loop"). Accuracy is checked against
// double-precision std:: functions in tests/ops/elementwise_math_test.cpp.
#include <cstdint>
#include <cstring>
#include <cmath>

namespace tarn::kernels::cpu::math {

inline float bits_to_float(int32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

inline int32_t float_to_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// c ? a : b, computed with both sides evaluated and blended through a mask (see above).
inline float select(bool c, float a, float b) {
  const int32_t mask = c ? -1 : 0;
  return bits_to_float((float_to_bits(a) & mask) | (float_to_bits(b) & ~mask));
}

// exp(x) to ~1 ulp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r from the
// Cephes expf minimax polynomial, then the scale 2^n applied as two halves so that every n in
// [-150, 128] stays a normal float (subnormal results and overflow to inf come out right).
inline float exp(float x) {
  constexpr float kHi = 88.8f;    // above log(FLT_MAX) = 88.72: the product overflows to inf
  constexpr float kLo = -105.0f;  // below log(smallest subnormal / 2) = -103.97: rounds to 0
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // ln2 with its low bits zero: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln2 - kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                  kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
  // NaN fails both comparisons, stays in xc and propagates through the polynomial; the integer
  // exponent is taken from a NaN-free copy so that the float-to-int conversion stays defined.
  float xc = select(kHi < x, kHi, x);
  xc = select(xc < kLo, kLo, xc);
  const float nf = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  float r = std::fma(nf, -kLn2Hi, xc);
  r = std::fma(nf, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r + 1.0f);
  const int32_t n = static_cast<int32_t>(select(nf == nf, nf, 0.0f));
  const int32_t n1 = n >> 1;  // arithmetic shift: floor(n / 2); both halves in [-76, 65]
  const float s1 = bits_to_float(static_cast<int32_t>(static_cast<uint32_t>(n1 + 127) << 23));
  const float s2 = bits_to_float(static_cast<int32_t>(static_cast<uint32_t>(n - n1 + 127) << 23));
  return p * s1 * s2;
}

// tanh(x): the Cephes tanhf odd polynomial for |x| < 0.625 (where 1 - 2/(e^2x + 1) would lose
// relative precision to cancellation), the exp form above it.
inline float tanh(float x) {
  constexpr float kSmall = 0.625f;
  constexpr float kQ0 = -5.70498872745e-3f, kQ1 = 2.06390887954e-2f, kQ2 = -5.37397155531e-2f,
                  kQ3 = 1.33314422036e-1f, kQ4 = -3.33332819422e-1f;
  const float ax = std::fabs(x);
  const float z = x * x;
  float q = std::fma(kQ0, z, kQ1);
  q = std::fma(q, z, kQ2);
  q = std::fma(q, z, kQ3);
  q = std::fma(q, z, kQ4);
  const float small = std::fma(q * z, x, x);
  const float big = 1.0f - 2.0f / (exp(2.0f * ax) + 1.0f);  // e^2|x| = inf gives exactly 1; NaN stays
  return select(ax < kSmall, small, std::copysign(big, x));
}

// erf(x): the odd/even rational minimax approximation used by Eigen and XLA for f32
// (erf = x P(x^2) / Q(x^2) on [-4, 4], where erf(4) rounds to 1 in f32). Absolute error ~1e-7,
// relative error small near 0 as well.
inline float erf(float x) {
  constexpr float kClamp = 4.0f;
  constexpr float kA1 = -1.60960333262415e-02f, kA3 = -2.95459980854025e-03f, kA5 = -7.34990630326855e-04f,
                  kA7 = -5.69250639462346e-05f, kA9 = -2.10102402082508e-06f, kA11 = 2.77068142495902e-08f,
                  kA13 = -2.72614225801306e-10f;
  constexpr float kB0 = -1.42647390514189e-02f, kB2 = -7.37332916720468e-03f, kB4 = -1.68282697438203e-03f,
                  kB6 = -2.13374055278905e-04f, kB8 = -1.45660718464996e-05f;
  float xc = select(kClamp < x, kClamp, x);  // NaN passes both and propagates
  xc = select(xc < -kClamp, -kClamp, xc);
  const float z = xc * xc;
  float p = std::fma(z, kA13, kA11);
  p = std::fma(z, p, kA9);
  p = std::fma(z, p, kA7);
  p = std::fma(z, p, kA5);
  p = std::fma(z, p, kA3);
  p = std::fma(z, p, kA1);
  float q = std::fma(z, kB8, kB6);
  q = std::fma(z, q, kB4);
  q = std::fma(z, q, kB2);
  q = std::fma(z, q, kB0);
  return xc * p / q;
}

}  // namespace tarn::kernels::cpu::math
