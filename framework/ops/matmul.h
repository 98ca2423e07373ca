#pragma once
// Matrix products through OpenBLAS sgemm (cuBLAS on CUDA), with autograd. With Precision::bf16
// (framework/precision.h) the operands, and in the backward dC, are rounded to bf16 and
// multiplied by the bf16 GEMM (oneDNN on the CPU, cuBLAS tensor cores on CUDA) with f32
// accumulation; inputs, result and gradients stay f32 tensors.
#include "framework/precision.h"
#include "framework/tensor.h"

namespace tarn {

// a: (..., M, K) or (..., K, M) if trans_a; b: (..., K, N) or (..., N, K) if trans_b.
// Leading (batch) dims must match, or b may have none (a shared matrix, e.g. a weight).
// Returns (..., M, N).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              Precision precision = Precision::f32);

// x: (..., in), weight: (out, in) as PyTorch / HuggingFace store it, bias: (out) or undefined.
// Returns (..., out) = x weightᵀ + bias.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Precision precision = Precision::f32);

}  // namespace tarn
