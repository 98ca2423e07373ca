#include "framework/ops/causal_conv.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/causal_conv.h"

namespace tarn {

Tensor causal_depthwise_conv(const Tensor& x, const Tensor& w) {
  const char* op = "causal_depthwise_conv";
  const kernels::Backend& kb = ops_internal::kernels_for(op, x, w);
  TARN_ASSERT(x.dim() == 3 && w.dim() == 2 && w.size(1) == x.size(2) && w.size(0) >= 1, op,
              ": expected x (B, N, C) and w (taps, C), got x ", x.shape().str(), " and w ", w.shape().str());
  const kernels::cpu::CausalConvDims dims{x.size(0), x.size(1), x.size(2), w.size(0)};
  Tensor y = Tensor::empty(x.shape(), x.device());
  kb.causal_conv_forward(dims, x.device_f32(), w.device_f32(), y.device_f32());
  return record(op, y, {x, w}, [x, w, dims, op](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    const kernels::Backend& kd = ops_internal::kernels_for(op, x, dy);
    Tensor dx = needs[0] ? Tensor::empty(x.shape(), x.device()) : Tensor();
    Tensor dw = needs[1] ? Tensor::empty(w.shape(), w.device()) : Tensor();
    kd.causal_conv_backward(dims, x.device_f32(), w.device_f32(), dy.device_f32(), needs[0] ? dx.device_f32() : nullptr,
                            needs[1] ? dw.device_f32() : nullptr);
    return {dx, dw};
  });
}

}  // namespace tarn
