#pragma once
// Per-row reductions shared by the softmax, cross-entropy and layer-norm kernels (private to
// kernels/cpu). Sums accumulate in double: a vocabulary-wide row summed in f32 loses ~1e-5
// relative wherever the loop is not vectorised (a sequential f32 sum of 8000 terms), and the
// conversion is free next to the memory traffic. Results are returned as f32.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/elementwise_math.h"

namespace tarn::kernels::cpu::row {

inline float max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

inline float sum(const float* x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s);
}

// log(sum exp(x)), shifted by the row maximum so that no exp overflows.
inline float logsumexp(const float* x, int64_t n) {
  const float m = max(x, n);
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += math::exp(x[i] - m);
  return m + static_cast<float>(std::log(s));
}

}  // namespace tarn::kernels::cpu::row
