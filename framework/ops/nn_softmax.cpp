// softmax and log_softmax over the last axis (framework/ops/nn.h). Both save their output:
// the backward needs nothing else.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/softmax.h"

namespace tarn {
namespace {

using RowKernel = decltype(kernels::Backend::softmax_forward);
using RowBackward = decltype(kernels::Backend::softmax_backward);

// forward / backward: which of the table's row kernels (softmax or log_softmax).
Tensor row_op(const char* name, const Tensor& x, RowKernel kernels::Backend::*forward,
              RowBackward kernels::Backend::*backward) {
  const kernels::Backend& k = ops_internal::kernels_for(name, x);
  TARN_ASSERT(x.dim() >= 1, name, ": needs at least one axis, got shape ", x.shape().str());
  const int64_t cols = x.shape().back();
  const int64_t rows = cols ? x.numel() / cols : 0;
  Tensor y = Tensor::empty(x.shape(), x.device());
  (k.*forward)(x.device_f32(), y.device_f32(), rows, cols);
  return record(name, y, {x}, [name, y, rows, cols, backward](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = ops_internal::kernels_for(name, y, dy);
    Tensor dx = Tensor::empty(dy.shape(), dy.device());
    (kb.*backward)(y.device_f32(), dy.device_f32(), dx.device_f32(), rows, cols);
    return {dx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return row_op("softmax", x, &kernels::Backend::softmax_forward, &kernels::Backend::softmax_backward);
}

Tensor log_softmax(const Tensor& x) {
  return row_op("log_softmax", x, &kernels::Backend::log_softmax_forward, &kernels::Backend::log_softmax_backward);
}

}  // namespace tarn
