// GELU forward and backward, elementwise (kernels/gelu.h).
//   exact: y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)),   y' = Phi(x) + x phi(x)
//   tanh:  y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr float kSqrtHalf = 0.70710678118654752f;     // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;   // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kTanhCubic = 0.044715f;               // the cubic term of the tanh form

__device__ __forceinline__ float exact_forward(float x) { return 0.5f * x * (1.0f + erff(x * kSqrtHalf)); }
__device__ __forceinline__ float exact_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return cdf + x * pdf;
}
__device__ __forceinline__ float tanh_forward(float x) {
  const float u = kSqrt2OverPi * (x + kTanhCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float tanh_grad(float x) {
  const float u = kSqrt2OverPi * (x + kTanhCubic * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

template <Gelu Kind>
__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = Kind == Gelu::exact ? exact_forward(x[i]) : tanh_forward(x[i]);
}

template <Gelu Kind>
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = dy[i] * (Kind == Gelu::exact ? exact_grad(x[i]) : tanh_grad(x[i]));
}

}  // namespace

void gelu_forward(Gelu kind, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  if (kind == Gelu::exact)
    tarn::launch(gelu_forward_kernel<Gelu::exact>, grid_for(n), kBlock, 0, nullptr, x, y, n);
  else
    tarn::launch(gelu_forward_kernel<Gelu::tanh>, grid_for(n), kBlock, 0, nullptr, x, y, n);
}

void gelu_backward(Gelu kind, const float* x, const float* dy, float* dx, int64_t n) {
  if (n <= 0) return;
  if (kind == Gelu::exact)
    tarn::launch(gelu_backward_kernel<Gelu::exact>, grid_for(n), kBlock, 0, nullptr, x, dy, dx, n);
  else
    tarn::launch(gelu_backward_kernel<Gelu::tanh>, grid_for(n), kBlock, 0, nullptr, x, dy, dx, n);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
