#include "layers/layer_norm.h"

#include "framework/ops/nn.h"

namespace tarn {

LayerNorm::LayerNorm(int64_t dim, float eps) : eps_(eps) {
  weight = Tensor::ones({dim});
  bias = Tensor::zeros({dim});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) const {
  TARN_ASSERT(x.dim() >= 1 && x.shape().back() == dim(), "LayerNorm: input shape ", x.shape().str(),
              " does not end in ", dim());
  return layer_norm(x, weight, bias, eps_);
}

}  // namespace tarn
