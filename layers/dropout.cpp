#include "layers/dropout.h"

#include "framework/ops/nn.h"

namespace tarn {

Tensor DropoutStreams::apply(const Tensor& x, float p, bool training) {
  if (!training || p <= 0.0f) return x;
  return dropout(x, p, true, state_.seed, state_.counter++);
}

}  // namespace tarn
