#pragma once
// The reduction behind every broadcasting backward (private to framework/ops).
#include "framework/tensor.h"

namespace tarn::ops_internal {

// alpha * g summed over the axes along which `target` was stretched to g's shape (NumPy
// alignment). No autograd. When nothing is summed and alpha == 1 the result is a view of g.
Tensor sum_to_shape(const Tensor& g, const Shape& target, float alpha = 1.0f);

}  // namespace tarn::ops_internal
