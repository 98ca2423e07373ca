// Fused layer norm over the last axis (framework/ops/nn.h). Saves x, gamma and the per-row
// mean and rstd (2 floats a row), so the backward never recomputes statistics.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/layer_norm.h"

namespace tarn {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  constexpr const char* kOp = "layer_norm";
  const kernels::Backend& k = ops_internal::kernels_for(kOp, x);
  TARN_ASSERT(x.dim() >= 1, kOp, ": needs at least one axis, got shape ", x.shape().str());
  const int64_t cols = x.shape().back();
  const int64_t rows = cols ? x.numel() / cols : 0;
  for (const Tensor* p : {&gamma, &beta}) {
    if (!p->defined()) continue;  // undefined gamma / beta: no scale / no shift
    ops_internal::kernels_for(kOp, x, *p);
    TARN_ASSERT(p->dim() == 1 && p->shape()[0] == cols, kOp, ": ", p == &gamma ? "gamma" : "beta", " of shape ",
                p->shape().str(), " does not match the last axis of x ", x.shape().str());
  }
  TARN_ASSERT(eps >= 0.0f, kOp, ": eps must be >= 0, got ", eps);

  const Device dev = x.device();
  Tensor y = Tensor::empty(x.shape(), dev);
  Tensor mean = Tensor::empty(Shape{rows}, dev), rstd = Tensor::empty(Shape{rows}, dev);
  k.layer_norm_forward(x.device_f32(), gamma.defined() ? gamma.device_f32() : nullptr,
                       beta.defined() ? beta.device_f32() : nullptr, y.device_f32(), mean.device_f32(),
                       rstd.device_f32(), rows, cols, eps);
  Tensor xd = x.detach(), gd = gamma.detach();
  const bool has_gamma = gamma.defined(), has_beta = beta.defined();
  return record(kOp, y, {x, gamma, beta},
                [xd, gd, mean, rstd, rows, cols, has_gamma, has_beta](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const kernels::Backend& kb = ops_internal::kernels_for("layer_norm", xd, dy);
                  const Device dev = dy.device();
                  Grads g(3);
                  if (needs[0]) g[0] = Tensor::empty(xd.shape(), dev);
                  if (has_gamma && needs[1]) g[1] = Tensor::empty(Shape{cols}, dev);
                  if (has_beta && needs[2]) g[2] = Tensor::empty(Shape{cols}, dev);
                  auto ptr = [](const Tensor& t) { return t.defined() ? t.device_f32() : nullptr; };
                  kb.layer_norm_backward(xd.device_f32(), dy.device_f32(), has_gamma ? gd.device_f32() : nullptr,
                                         mean.device_f32(), rstd.device_f32(), ptr(g[0]), ptr(g[1]), ptr(g[2]), rows,
                                         cols);
                  return g;
                });
}

}  // namespace tarn
