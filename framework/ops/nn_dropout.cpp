// Inverted dropout (framework/ops/nn.h). Saves nothing but (p, seed, stream): the backward
// regenerates the Philox mask (kernels/dropout.h).
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/dropout.h"

namespace tarn {

Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream) {
  constexpr const char* kOp = "dropout";
  const kernels::Backend& k = ops_internal::kernels_for(kOp, x);
  TARN_ASSERT(p >= 0.0f && p <= 1.0f, kOp, ": p must be in [0, 1], got ", p);
  if (!training || p == 0.0f) return x;  // identity: the same tensor, same graph
  Tensor y = Tensor::empty(x.shape(), x.device());
  k.dropout_apply(x.device_f32(), y.device_f32(), x.numel(), p, seed, stream);
  return record(kOp, y, {x}, [p, seed, stream](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = ops_internal::kernels_for("dropout", dy);
    Tensor dx = Tensor::empty(dy.shape(), dy.device());
    kb.dropout_apply(dy.device_f32(), dx.device_f32(), dy.numel(), p, seed, stream);
    return {dx};
  });
}

}  // namespace tarn
