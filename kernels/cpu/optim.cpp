#include "kernels/optim.h"

#include <cmath>
#include <vector>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h) {
  // Scalars folded once, in double, as PyTorch computes them on the host.
  const double t = static_cast<double>(h.step);
  const float decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  const float step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  const float b1 = h.beta1, b2 = h.beta2, one_b1 = 1.0f - h.beta1, one_b2 = 1.0f - h.beta2, eps = h.eps;
  const float scale = h.grad_scale;

#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * scale;
    const float mi = b1 * m[i] + one_b1 * g;
    const float vi = b2 * v[i] + one_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    param[i] = param[i] * decay - step_size * (mi / denom);
  }
}

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kSumSquaresBlock - 1) / kSumSquaresBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumSquaresBlock;
    const int64_t end = begin + kSumSquaresBlock < n ? begin + kSumSquaresBlock : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace tarn::kernels::cpu
