#pragma once
// The short causal depthwise convolution with autograd (kernels/causal_conv.h): x (B, N, C), w
// (taps, C), row i of w weighing the token i positions back -> (B, N, C). On the CPU and CUDA.
#include "framework/tensor.h"

namespace tarn {

Tensor causal_depthwise_conv(const Tensor& x, const Tensor& w);

}  // namespace tarn
