// softmax and log_softmax over the last axis (framework/ops/nn.h). Both save their output:
// the backward needs nothing else.
#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/softmax.h"

namespace tarn {
namespace {

using RowKernel = void (*)(const float*, float*, int64_t, int64_t);
using RowBackward = void (*)(const float*, const float*, float*, int64_t, int64_t);

Tensor row_op(const char* name, const Tensor& x, RowKernel forward, RowBackward backward) {
  ops_internal::check_cpu_f32(name, x);
  TARN_CHECK(x.dim() >= 1, name, ": needs at least one axis, got shape ", x.shape().str());
  const int64_t cols = x.shape().back();
  const int64_t rows = cols ? x.numel() / cols : 0;
  Tensor y = Tensor::empty(x.shape());
  forward(x.f32(), y.f32(), rows, cols);
  return record(name, y, {x}, [y, rows, cols, backward](const Tensor& dy, const NeedsGrad&) -> Grads {
    Tensor dx = Tensor::empty(dy.shape());
    backward(y.f32(), dy.f32(), dx.f32(), rows, cols);
    return {dx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return row_op("softmax", x, kernels::cpu::softmax_forward, kernels::cpu::softmax_backward);
}

Tensor log_softmax(const Tensor& x) {
  return row_op("log_softmax", x, kernels::cpu::log_softmax_forward, kernels::cpu::log_softmax_backward);
}

}  // namespace tarn
