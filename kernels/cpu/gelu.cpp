#include "kernels/gelu.h"

#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/elementwise_parallel.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kTanhCubic = 0.044715f;               // the cubic term of the tanh form

inline float exact_forward(float x) { return 0.5f * x * (1.0f + math::erf(x * kSqrtHalf)); }

inline float exact_grad(float x) {
  const float cdf = 0.5f * (1.0f + math::erf(x * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * math::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

// 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + e^-2u): one exp and one division instead of a
// full tanh, exact in exact arithmetic; e^-2u = inf for very negative x gives y = -0.
inline float tanh_forward(float x) {
  const float u = kSqrt2OverPi * (x + kTanhCubic * x * x * x);
  return x / (1.0f + math::exp(-2.0f * u));
}

// With e = e^-2u and s = sigmoid(2u) = 1 / (1 + e): y = x s, y' = s + 2 x s (1 - s) u', where
// 1 - s = e s is formed without the cancellation of 1 - s at large x. The exponent is capped
// so that e s stays finite (inf * 0) where x < -9.7 and the gradient is 0 to f32 anyway.
inline float tanh_grad(float x) {
  constexpr float kMaxExponent = 80.0f;
  const float u = kSqrt2OverPi * (x + kTanhCubic * x * x * x);
  const float e = math::exp(math::select(-2.0f * u < kMaxExponent, -2.0f * u, kMaxExponent));
  const float s = 1.0f / (1.0f + e);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * x * x);
  return s + 2.0f * x * (e * s) * s * du;
}

}  // namespace

void gelu_forward(Gelu kind, const float* x, float* y, int64_t n) {
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
    if (kind == Gelu::exact) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = exact_forward(x[i]);
    } else {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = tanh_forward(x[i]);
    }
  });
}

void gelu_backward(Gelu kind, const float* x, const float* dy, float* dx, int64_t n) {
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
    if (kind == Gelu::exact) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * exact_grad(x[i]);
    } else {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * tanh_grad(x[i]);
    }
  });
}

}  // namespace tarn::kernels::cpu
