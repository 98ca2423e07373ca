// GELU (framework/ops/nn.h): saves x, the backward recomputes erf / tanh from it.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/gelu.h"

namespace tarn {

Tensor gelu(const Tensor& x, GeluKind kind) {
  ops_internal::check_cpu_f32("gelu", x);
  const kernels::cpu::Gelu k = kind == GeluKind::exact ? kernels::cpu::Gelu::exact : kernels::cpu::Gelu::tanh;
  Tensor y = Tensor::empty(x.shape());
  kernels::cpu::gelu_forward(k, x.f32(), y.f32(), x.numel());
  Tensor xd = x.detach();
  return record("gelu", y, {x}, [xd, k](const Tensor& dy, const NeedsGrad&) -> Grads {
    Tensor dx = Tensor::empty(dy.shape());
    kernels::cpu::gelu_backward(k, xd.f32(), dy.f32(), dx.f32(), dy.numel());
    return {dx};
  });
}

}  // namespace tarn
