// RMS norm over the last axis (framework/ops/nn.h): saves x, gamma and the per-row rstd.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/rms_norm.h"

namespace tarn {

Tensor rms_norm(const Tensor& x, const Tensor& gamma, float divisor, float eps) {
  constexpr const char* kOp = "rms_norm";
  const kernels::Backend& k = ops_internal::kernels_for(kOp, x);
  TARN_ASSERT(x.dim() >= 1, kOp, ": needs at least one axis, got shape ", x.shape().str());
  const int64_t cols = x.shape().back();
  const int64_t rows = cols ? x.numel() / cols : 0;
  if (gamma.defined()) {
    ops_internal::kernels_for(kOp, x, gamma);
    TARN_ASSERT(gamma.dim() == 1 && gamma.shape()[0] == cols, kOp, ": gamma of shape ", gamma.shape().str(),
                " does not match the last axis of x ", x.shape().str());
  }
  TARN_ASSERT(divisor > 0.0f && eps >= 0.0f, kOp, ": divisor must be > 0 and eps >= 0, got ", divisor, " and ", eps);

  const Device dev = x.device();
  Tensor y = Tensor::empty(x.shape(), dev);
  Tensor rstd = Tensor::empty(Shape{rows}, dev);
  k.rms_norm_forward(x.device_f32(), gamma.defined() ? gamma.device_f32() : nullptr, y.device_f32(), rstd.device_f32(),
                     rows, cols, divisor, eps);
  Tensor xd = x.detach(), gd = gamma.detach();
  const bool has_gamma = gamma.defined();
  return record(kOp, y, {x, gamma},
                [xd, gd, rstd, rows, cols, divisor, has_gamma](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const kernels::Backend& kb = ops_internal::kernels_for("rms_norm", xd, dy);
                  Grads g(2);
                  if (needs[0]) g[0] = Tensor::empty(xd.shape(), dy.device());
                  if (has_gamma && needs[1]) g[1] = Tensor::empty(Shape{cols}, dy.device());
                  auto ptr = [](const Tensor& t) { return t.defined() ? t.device_f32() : nullptr; };
                  kb.rms_norm_backward(xd.device_f32(), dy.device_f32(), has_gamma ? gd.device_f32() : nullptr,
                                       rstd.device_f32(), ptr(g[0]), ptr(g[1]), rows, cols, divisor);
                  return g;
                });
}

}  // namespace tarn
