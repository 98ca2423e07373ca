// Optimizer kernels over flat f32 arrays (kernels/optim.h): the fused AdamW update, the sum of
// squares behind the global gradient norm, and the in-place scale for clipping.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

// The update's scalars, folded on the host in double as the CPU kernel (and PyTorch) do.
struct AdamWScalars {
  float decay, step_size, bc2_sqrt, b1, b2, one_b1, one_b2, eps, grad_scale;
};

// param, grad, m, v: (n), updated in place.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWScalars k) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float g = grad[i] * k.grad_scale;  // the clipping factor, as scale_kernel would store it
    const float mi = k.b1 * m[i] + k.one_b1 * g;
    const float vi = k.b2 * v[i] + k.one_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
    param[i] = param[i] * k.decay - k.step_size * (mi / denom);
  }
}

// partial[b] = sum of x_i^2 over block b's kSumSquaresBlock elements, in double (the CPU
// kernel's blocks; combined in block order below, so the result never depends on the launch).
__global__ void sum_squares_kernel(const float* x, int64_t n, double* partial) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * cpu::kSumSquaresBlock;
  const int64_t end = begin + cpu::kSumSquaresBlock < n ? begin + cpu::kSumSquaresBlock : n;
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += static_cast<double>(x[i]) * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double* partial, int64_t count, double* result) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) result[0] = s;
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = global_index(); i < n; i += global_stride()) x[i] *= s;
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  if (n <= 0) return;
  const double t = static_cast<double>(h.step);
  AdamWScalars k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  k.step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  k.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  k.b1 = h.beta1;
  k.b2 = h.beta2;
  k.one_b1 = 1.0f - h.beta1;
  k.one_b2 = 1.0f - h.beta2;
  k.eps = h.eps;
  k.grad_scale = h.grad_scale;
  tarn::launch(adamw_kernel, grid_for(n), kBlock, 0, nullptr, param, grad, m, v, n, k);
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + cpu::kSumSquaresBlock - 1) / cpu::kSumSquaresBlock;
  TARN_ASSERT(blocks <= 0x7fffffffLL, "sum_squares: ", n, " values is too many");
  Scratch<double> partial(blocks + 1);
  double* result = partial.get() + blocks;
  tarn::launch(sum_squares_kernel, static_cast<unsigned>(blocks), kBlock, 0, nullptr, x, n, partial.get());
  tarn::launch(sum_partials_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(partial.get()), blocks, result);
  return device::read_back(result);
}

void scale_inplace(float* x, int64_t n, float s) {
  if (n <= 0) return;
  tarn::launch(scale_kernel, grid_for(n), kBlock, 0, nullptr, x, n, s);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
