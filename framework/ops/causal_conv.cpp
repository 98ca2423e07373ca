#include "framework/ops/causal_conv.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/causal_conv.h"

namespace tarn {

Tensor causal_depthwise_conv(const Tensor& x, const Tensor& w) {
  const char* op = "causal_depthwise_conv";
  for (const Tensor* t : {&x, &w}) {
    ops_internal::check_f32(op, *t);
    TARN_ASSERT(t->device().is_cpu(), op, ": CPU only, got a tensor on ", t->device().str());
  }
  TARN_ASSERT(x.dim() == 3 && w.dim() == 2 && w.size(1) == x.size(2) && w.size(0) >= 1, op,
              ": expected x (B, N, C) and w (taps, C), got x ", x.shape().str(), " and w ", w.shape().str());
  const kernels::cpu::CausalConvDims dims{x.size(0), x.size(1), x.size(2), w.size(0)};
  Tensor y = Tensor::empty(x.shape());
  kernels::cpu::causal_conv_forward(dims, x.f32(), w.f32(), y.f32());
  return record(op, y, {x, w}, [x, w, dims](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    Tensor dx = needs[0] ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw = needs[1] ? Tensor::empty(w.shape()) : Tensor();
    kernels::cpu::causal_conv_backward(dims, x.f32(), w.f32(), dy.f32(), needs[0] ? dx.f32() : nullptr,
                                       needs[1] ? dw.f32() : nullptr);
    return {dx, dw};
  });
}

}  // namespace tarn
