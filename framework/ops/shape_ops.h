#pragma once
// Layout ops with autograd. reshape is a view; the rest copy (tensors stay contiguous).
#include <vector>

#include "framework/tensor.h"

namespace tarn {

Tensor reshape(const Tensor& x, const Shape& shape);   // one extent may be -1
Tensor transpose(const Tensor& x, int axis0, int axis1);
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor concat(const std::vector<Tensor>& xs, int axis);
Tensor slice(const Tensor& x, int axis, int64_t begin, int64_t end);  // [begin, end) along axis
// x copied to `device` (x itself when it is there already); the gradient is copied back.
Tensor to_device(const Tensor& x, Device device);

}  // namespace tarn
