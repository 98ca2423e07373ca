#include "layers/linear.h"

#include "framework/ops/matmul.h"

namespace tarn {

Linear::Linear(int64_t in_features, int64_t out_features, ParamInit& init, bool with_bias) {
  weight = init.normal({out_features, in_features});
  register_parameter("weight", weight);
  if (with_bias) {
    bias = init.zeros({out_features});
    register_parameter("bias", bias);
  }
}

void Linear::start_bias_at(float value) {
  TARN_ASSERT(bias.defined(), "Linear::start_bias_at: this Linear has no bias");
  bias.fill(value);
  keep_initial_value(bias);
}

Tensor Linear::forward(const Tensor& x) const {
  TARN_ASSERT(x.dim() >= 1 && x.shape().back() == in_features(), "Linear: input shape ", x.shape().str(),
              " does not end in in_features = ", in_features());
  return linear(x, weight, bias, precision());
}

}  // namespace tarn
