#include "framework/optim/clip_grad.h"

#include <cmath>
#include <unordered_set>

#include "framework/backend.h"
#include "kernels/optim.h"

namespace tarn {
namespace {

std::vector<Tensor*> tensors_of(const std::vector<std::pair<std::string, Tensor*>>& named) {
  std::vector<Tensor*> out;
  out.reserve(named.size());
  for (const auto& [name, p] : named) out.push_back(p);
  return out;
}

}  // namespace

double global_grad_norm(const std::vector<Tensor*>& params) {
  double sum = 0.0;
  for (const Tensor* p : params) {
    const Tensor g = p->grad();
    if (!g.defined()) continue;
    sum += backend_for(g.device()).sum_squares(g.device_f32(), g.numel());
  }
  return std::sqrt(sum);
}

double global_grad_norm(const std::vector<std::pair<std::string, Tensor*>>& params) {
  return global_grad_norm(tensors_of(params));
}

// kernels/optim.h holds the rule, so that the device's fused update applies the same one.
float clip_factor(double norm, float max_norm) { return kernels::cpu::clip_scale(norm, max_norm); }

float clip_grad_norm(const std::vector<Tensor*>& params, float max_norm) {
  TARN_CHECK(max_norm > 0.0f, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double norm = global_grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return static_cast<float>(norm);
  const float factor = clip_factor(norm, max_norm);
  // Leaf gradients may alias one another: autograd hands an add's dy to both inputs without
  // copying. Scale each distinct buffer once, or aliased gradients would be scaled twice.
  std::unordered_set<const float*> scaled;
  for (const Tensor* p : params) {
    const Tensor g = p->grad();
    if (!g.defined() || !scaled.insert(g.device_f32()).second) continue;
    backend_for(g.device()).scale_inplace(g.device_f32(), g.numel(), factor);
  }
  return static_cast<float>(norm);
}

float clip_grad_norm(const std::vector<std::pair<std::string, Tensor*>>& params, float max_norm) {
  return clip_grad_norm(tensors_of(params), max_norm);
}

}  // namespace tarn
