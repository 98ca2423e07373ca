#pragma once
// Strided-batched GEMM on top of OpenBLAS sgemm, row-major:
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i,  i < batch,
// with op(X) = Xᵀ when the flag is set; op(A_i) is M×K, op(B_i) is K×N, C_i is M×N.
// A stride of 0 shares that matrix across the batch. strideC == 0 accumulates every product
// into one C (the weight gradient of a shared matrix): those run one after another.
#include <cstdint>

namespace tarn::kernels::cpu {

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta, float* C,
                  int64_t stride_c);

}  // namespace tarn::kernels::cpu
