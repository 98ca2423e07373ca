#pragma once
// Linear: y = x Wᵀ + b with W stored (out, in) as PyTorch / HuggingFace store it, so that the
// parameter names and shapes ("fc1.weight" (ffn, d_model)) match an HF checkpoint.
#include <cstdint>

#include "framework/module.h"
#include "layers/param_init.h"

namespace tarn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, ParamInit& init, bool with_bias = true);

  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  // The bias starts at `value` instead of 0, and model-wide initialisers (framework/init.h)
  // keep it.
  void start_bias_at(float value);

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  Tensor weight;  // (out, in)
  Tensor bias;    // (out), undefined without bias
};

}  // namespace tarn
