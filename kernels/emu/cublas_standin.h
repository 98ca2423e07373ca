#pragma once
// The slice of cuBLAS that kernels/cuda/gemm.cu calls (f32 and bf16 GEMMs), for the emulated build: the same
// signatures and the same column-major semantics, computed by plain loops (f32 products summed
// in double), with cuBLAS' argument checks (a leading dimension below the rows it must span is
// CUBLAS_STATUS_INVALID_VALUE, as on hardware). So the row-major to column-major mapping in
// gemm.cu runs, and is checked against the CPU GEMM, where no GPU exists; forwarding to the
// CPU GEMM instead would compare that GEMM with itself.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/emu/bf16.h"

namespace tarn::emu::cublas {

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
struct cublasContext {};
using cublasHandle_t = cublasContext*;

inline const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n; batch
// products at the given element strides. T is float or tarn::bf16 (widened exactly).
inline double widen(float x) { return x; }
inline double widen(::tarn::bf16 x) { return ::tarn::bf16_to_float(x); }

template <typename T>
cublasStatus_t gemm_strided_batched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                                    const T* A, int lda, long long stride_a, const T* B, int ldb, long long stride_b,
                                    float beta, float* C, int ldc, long long stride_c, int batch) {
  const bool ta = op_a == CUBLAS_OP_T, tb = op_b == CUBLAS_OP_T;
  // cuBLAS' checks: A is stored lda x (ta ? m : k) with lda >= (ta ? k : m); likewise B, C.
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::vector<double> column(static_cast<size_t>(m));
  for (int b = 0; b < batch; ++b) {
    const T* a = A + b * stride_a;
    const T* bb = B + b * stride_b;
    float* c = C + b * stride_c;
    for (int j = 0; j < n; ++j) {
      std::fill(column.begin(), column.end(), 0.0);
      for (int p = 0; p < k; ++p) {
        const double b_pj =
            widen(tb ? bb[j + static_cast<int64_t>(p) * ldb] : bb[p + static_cast<int64_t>(j) * ldb]);
        for (int i = 0; i < m; ++i)
          column[i] += b_pj * widen(ta ? a[p + static_cast<int64_t>(i) * lda] : a[i + static_cast<int64_t>(p) * lda]);
      }
      float* cj = c + static_cast<int64_t>(j) * ldc;
      for (int i = 0; i < m; ++i)  // beta == 0 overwrites (C may hold NaN), as cuBLAS does
        cj[i] = static_cast<float>(alpha * column[i] + (beta == 0.0f ? 0.0 : double(beta) * cj[i]));
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b, int m,
                                                int n, int k, const float* alpha, const float* A, int lda,
                                                long long stride_a, const float* B, int ldb, long long stride_b,
                                                const float* beta, float* C, int ldc, long long stride_c,
                                                int batch) {
  return gemm_strided_batched(op_a, op_b, m, n, k, *alpha, A, lda, stride_a, B, ldb, stride_b, *beta, C, ldc,
                              stride_c, batch);
}

// The mixed-precision GEMM as gemm.cu calls it: bf16 A and B, f32 C and compute; any other
// combination is refused as cuBLAS refuses an unsupported one.
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b,
                                                 int m, int n, int k, const void* alpha, const void* A,
                                                 cudaDataType a_type, int lda, long long stride_a, const void* B,
                                                 cudaDataType b_type, int ldb, long long stride_b, const void* beta,
                                                 void* C, cudaDataType c_type, int ldc, long long stride_c, int batch,
                                                 cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (a_type != CUDA_R_16BF || b_type != CUDA_R_16BF || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_INVALID_VALUE;
  return gemm_strided_batched(op_a, op_b, m, n, k, *static_cast<const float*>(alpha),
                              static_cast<const ::tarn::bf16*>(A), lda, stride_a, static_cast<const ::tarn::bf16*>(B),
                              ldb, stride_b, *static_cast<const float*>(beta), static_cast<float*>(C), ldc, stride_c,
                              batch);
}

}  // namespace tarn::emu::cublas
