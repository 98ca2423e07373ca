#pragma once
// LayerNorm over the last axis with HF's parameter names ("weight" = gamma, "bias" = beta).
#include <cstdint>

#include "framework/module.h"

namespace tarn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);

  Tensor forward(const Tensor& x) const;  // (..., dim) -> (..., dim)

  int64_t dim() const { return weight.size(0); }
  float eps() const { return eps_; }

  Tensor weight;  // (dim), ones
  Tensor bias;    // (dim), zeros

 private:
  float eps_;
};

}  // namespace tarn
