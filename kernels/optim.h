#pragma once
// Optimizer kernels over flat f32 arrays: the fused AdamW update, the sum of squares behind
// the global gradient norm, and an in-place scale for clipping. Raw pointers in, nothing else.
#include <cstdint>

namespace tarn::kernels::cpu {

// Hyper-parameters of one AdamW update. `step` is the 1-based index of this update for this
// parameter (bias correction uses beta^step), as PyTorch's per-parameter state["step"].
struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
  // Multiplies each gradient as the update reads it: the clipping factor, applied inside the
  // update's pass instead of a pass of its own. g * s in f32 is what scale_inplace stores, so
  // the update has the same bits either way; 1 leaves g exactly as it is.
  float grad_scale = 1.0f;
};

// One AdamW update in place, as torch.optim.AdamW (Loshchilov & Hutter, decoupled decay), of
// the gradient g = grad * grad_scale:
//   p <- p * (1 - lr*wd)
//   m <- b1*m + (1-b1)*g            v <- b2*v + (1-b2)*g^2
//   p <- p - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// param, grad, m, v: (n). Elementwise, so the result does not depend on the thread count.
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWHyper& h);

// Σ x_i² accumulated in double over fixed blocks of kSumSquaresBlock elements whose partial
// sums are added in block order: the same bits for any thread count.
constexpr int64_t kSumSquaresBlock = 8192;
double sum_squares(const float* x, int64_t n);

// x <- x * s.
void scale_inplace(float* x, int64_t n, float s);

}  // namespace tarn::kernels::cpu
