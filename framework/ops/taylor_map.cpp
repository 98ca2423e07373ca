// taylor_feature_map (framework/ops/attention.h) over the kernels of kernels/taylor_map.h.
#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/taylor_map.h"

namespace tarn {

Tensor taylor_feature_map(const Tensor& p, int order) {
  const char* op = "taylor_feature_map";
  const kernels::Backend& kb = ops_internal::kernels_for(op, p);
  TARN_ASSERT(p.dim() >= 1 && p.size(-1) >= 1 && p.size(-1) <= 255 && order >= 1 &&
                  order <= kernels::cpu::kMaxTaylorOrder,
              op, ": expected p (..., r) with 1 <= r <= 255 and order 1..", kernels::cpu::kMaxTaylorOrder, ", got p ",
              p.shape().str(), " and order ", order);
  const int64_t r = p.size(-1);
  const kernels::cpu::TaylorMapDims dims{p.numel() / r, r, order};
  std::vector<int64_t> shape = p.shape().vec();
  shape.back() = kernels::cpu::taylor_feature_count(r, order);
  Tensor phi = Tensor::empty(Shape(shape), p.device());
  kb.taylor_map_forward(dims, p.device_f32(), phi.device_f32());
  return record(op, phi, {p}, [p, dims, op](const Tensor& d_phi, const NeedsGrad&) -> Grads {
    const kernels::Backend& kd = ops_internal::kernels_for(op, p, d_phi);
    Tensor dp = Tensor::empty(p.shape(), p.device());
    kd.taylor_map_backward(dims, p.device_f32(), d_phi.device_f32(), dp.device_f32());
    return {dp};
  });
}

}  // namespace tarn
