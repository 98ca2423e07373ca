#pragma once
// Matrix products through OpenBLAS sgemm (cuBLAS on CUDA), with autograd.
#include "framework/tensor.h"

namespace tarn {

// a: (..., M, K) or (..., K, M) if trans_a; b: (..., K, N) or (..., N, K) if trans_b.
// Leading (batch) dims must match, or b may have none (a shared matrix, e.g. a weight).
// Returns (..., M, N).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// x: (..., in), weight: (out, in) as PyTorch / HuggingFace store it, bias: (out) or undefined.
// Returns (..., out) = x weightᵀ + bias.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tarn
