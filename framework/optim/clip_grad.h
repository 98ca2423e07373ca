#pragma once
// Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_: one L2 norm over every
// gradient together; when it exceeds max_norm, every gradient is scaled by
// max_norm / (norm + 1e-6). Parameters without a gradient are skipped; gradients that share
// one buffer (autograd may alias them) are scaled once.
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

// sqrt(Σ over parameters Σ g²), accumulated in double in a fixed order: the same value for any
// thread count. With data-parallel training, call it after the all-reduce.
double global_grad_norm(const std::vector<Tensor*>& params);
double global_grad_norm(const std::vector<std::pair<std::string, Tensor*>>& params);

// The factor clip_grad_norm() scales every gradient by for a global norm `norm`:
// max_norm / (norm + 1e-6) in f32 when norm exceeds max_norm, else 1 (also for max_norm 0, no
// clipping, and a non-finite norm). AdamW::step(factor) applies it in the update's own pass.
float clip_factor(double norm, float max_norm);

// Returns the norm before clipping. A non-finite norm (inf/NaN somewhere in the gradients) is
// returned and nothing is scaled: the caller decides (skip the step, lower the loss scale).
float clip_grad_norm(const std::vector<Tensor*>& params, float max_norm);
float clip_grad_norm(const std::vector<std::pair<std::string, Tensor*>>& params, float max_norm);

}  // namespace tarn
