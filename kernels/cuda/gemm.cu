// Strided-batched GEMM (kernels/gemm.h) on cuBLAS; the emulated build hands it to the CPU's
// OpenBLAS path (DESIGN.md section 4: cuBLAS sits behind a small interface), so only the
// hardware run checks the cuBLAS call itself.
//
// Row-major to cuBLAS' column-major: a row-major r x c matrix is its column-major transpose, so
// C = op(A) op(B) (row-major, M x N) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ (column-major, N x M).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/gemm.h"

#if defined(__CUDACC__)
#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#endif

namespace tarn::kernels::TARN_CUDA_NS {

#if defined(__CUDACC__)
namespace {

#define TARN_CUBLAS_CALL(call)                                                                  \
  do {                                                                                          \
    const cublasStatus_t tarn_st_ = (call);                                                     \
    TARN_CHECK(tarn_st_ == CUBLAS_STATUS_SUCCESS, #call, " failed: ", cublasGetStatusString(tarn_st_), " (", \
               __FILE__, ":", __LINE__, ")");                                                   \
  } while (0)

// TF32 tensor-core math only where the user asks for it (TARN_ALLOW_TF32=1 in the
// environment): it rounds the operands to 10 mantissa bits, which the CPU backend never does,
// so by default f32 GEMMs stay f32 and CPU and GPU runs agree to f32 rounding.
bool tf32_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("TARN_ALLOW_TF32");
    return v && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return allowed;
}

// One handle per host thread and device, created on first use, on the default stream.
cublasHandle_t handle() {
  int device = 0;
  TARN_CUDA_CALL(cudaGetDevice(&device));
  constexpr int kMaxDevices = 16;
  thread_local cublasHandle_t handles[kMaxDevices] = {};
  TARN_CHECK(device >= 0 && device < kMaxDevices, "gemm_batched: device ", device, " out of range");
  if (!handles[device]) {
    TARN_CUBLAS_CALL(cublasCreate(&handles[device]));
    TARN_CUBLAS_CALL(
        cublasSetMathMode(handles[device], tf32_allowed() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  TARN_CUBLAS_CALL(cublasSetStream(handles[device], nullptr));
  return handles[device];
}

}  // namespace
#endif

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta, float* C,
                  int64_t stride_c) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
#if defined(__CUDACC__)
  TARN_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && batch <= INT32_MAX,
             "gemm_batched: extents beyond cuBLAS' 32-bit int: M ", M, ", N ", N, ", K ", K, ", batch ", batch);
  cublasHandle_t h = handle();
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = static_cast<int>(trans_b ? K : N), lda = static_cast<int>(trans_a ? M : K), ldc = static_cast<int>(N);
  if (stride_c == 0 && batch > 1) {
    // Every product accumulates into one C: one after another (a batched call would race).
    for (int64_t i = 0; i < batch; ++i) {
      const float beta_i = i == 0 ? beta : 1.0f;
      TARN_CUBLAS_CALL(cublasSgemm(h, op_b, op_a, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K),
                                   &alpha, B + i * stride_b, ldb, A + i * stride_a, lda, &beta_i, C, ldc));
    }
    return;
  }
  TARN_CUBLAS_CALL(cublasSgemmStridedBatched(h, op_b, op_a, static_cast<int>(N), static_cast<int>(M),
                                             static_cast<int>(K), &alpha, B, ldb, stride_b, A, lda, stride_a, &beta,
                                             C, ldc, stride_c, static_cast<int>(batch)));
#else
  cpu::gemm_batched(trans_a, trans_b, batch, M, N, K, alpha, A, stride_a, B, stride_b, beta, C, stride_c);
#endif
}

}  // namespace tarn::kernels::TARN_CUDA_NS
