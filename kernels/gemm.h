#pragma once
// Strided-batched GEMM on top of OpenBLAS sgemm, row-major:
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i,  i < batch,
// with op(X) = Xᵀ when the flag is set; op(A_i) is M×K, op(B_i) is K×N, C_i is M×N.
// A stride of 0 shares that matrix across the batch. strideC == 0 accumulates every product
// into one C (the weight gradient of a shared matrix): those run one after another.
#include <cstdint>
#include <string>

#include "kernels/emu/bf16.h"

namespace tarn::kernels::cpu {

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta, float* C,
                  int64_t stride_c);

// The same product with bf16 A and B, products accumulated in f32 and C in f32: the GEMM of
// mixed-precision training (training.precision: bf16). Every product of two bf16 values is
// exact in f32, so the only roundings beyond those of the inputs are the f32 accumulation's.
// On the CPU: oneDNN's matmul (kernels/cpu/gemm_bf16.cpp) where the CPU has bf16 instructions
// and tarn was built with oneDNN; elsewhere the operands are widened to f32 and go through
// sgemm (the same result to f32 rounding, no faster than f32: bf16_gemm_engine says which).
void gemm_batched_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t stride_a, const bf16* B, int64_t stride_b, float beta, float* C,
                       int64_t stride_c);

// What runs gemm_batched_bf16 on `device` (ignored on the CPU). native: bf16 hardware does the
// products, so bf16 training is worth it; otherwise `description` says why not.
struct Bf16GemmEngine {
  bool native = false;
  std::string description;  // "oneDNN 2.6 bf16 matmul (avx512_core_bf16)", "this CPU has no bf16 instructions ..."
};
Bf16GemmEngine bf16_gemm_engine(int device);

// oneDNN primitives made so far (kept by shape: a steady training run stops making them).
int64_t bf16_gemm_primitives_created();

}  // namespace tarn::kernels::cpu
