#pragma once
// Reductions with autograd. Accumulation is in f32 with pairwise/blocked sums (double for the
// scalar total), so that large tensors do not lose precision.
#include "framework/tensor.h"

namespace tarn {

Tensor sum(const Tensor& x, int axis, bool keepdim = false);
Tensor mean(const Tensor& x, int axis, bool keepdim = false);
Tensor sum_all(const Tensor& x);   // shape ()
Tensor mean_all(const Tensor& x);  // shape ()

}  // namespace tarn
