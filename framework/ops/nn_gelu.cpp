// GELU (framework/ops/nn.h): saves x, the backward recomputes erf / tanh from it.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/gelu.h"

namespace tarn {

Tensor gelu(const Tensor& x, GeluKind kind) {
  const kernels::Backend& kb = ops_internal::kernels_for("gelu", x);
  const kernels::cpu::Gelu k = kind == GeluKind::exact ? kernels::cpu::Gelu::exact : kernels::cpu::Gelu::tanh;
  Tensor y = Tensor::empty(x.shape(), x.device());
  kb.gelu_forward(k, x.device_f32(), y.device_f32(), x.numel());
  Tensor xd = x.detach();
  return record("gelu", y, {x}, [xd, k](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kd = ops_internal::kernels_for("gelu", xd, dy);
    Tensor dx = Tensor::empty(dy.shape(), dy.device());
    kd.gelu_backward(k, xd.device_f32(), dy.device_f32(), dx.device_f32(), dy.numel());
    return {dx};
  });
}

}  // namespace tarn
