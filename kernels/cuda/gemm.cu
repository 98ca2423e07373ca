// Strided-batched GEMM (kernels/gemm.h) on cuBLAS. The emulated build calls a column-major
// stand-in with cuBLAS' signatures and argument checks (kernels/emu/cublas_standin.h), so the
// mapping below runs, and is checked against the CPU GEMM, in every build.
//
// Row-major to cuBLAS' column-major: a row-major r x c matrix is its column-major transpose, so
// C = op(A) op(B) (row-major, M x N) is computed as Cᵀ = op(B)ᵀ op(A)ᵀ (column-major, N x M).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/gemm.h"

#include <type_traits>

#if defined(__CUDACC__)
#include <cublas_v2.h>

#include <cstdlib>
#include <cstring>
#include <string>
#else
#include "kernels/emu/cublas_standin.h"
#endif

namespace tarn::kernels::TARN_CUDA_NS {

namespace {

#if !defined(__CUDACC__)
using namespace ::tarn::emu::cublas;
#endif

#define TARN_CUBLAS_CALL(call) TARN_CHECK_STATUS(call, #call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)

#if defined(__CUDACC__)
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
  TARN_ASSERT(device >= 0 && device < kMaxDevices, "gemm_batched: device ", device, " out of range");
  if (!handles[device]) {
    TARN_CUBLAS_CALL(cublasCreate(&handles[device]));
    TARN_CUBLAS_CALL(
        cublasSetMathMode(handles[device], tf32_allowed() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  TARN_CUBLAS_CALL(cublasSetStream(handles[device], nullptr));
  return handles[device];
}
#else
cublasHandle_t handle() { return nullptr; }  // the stand-in keeps no state
#endif

// The row-major product C = op(A) op(B) as cuBLAS' column-major Cᵀ = op(B)ᵀ op(A)ᵀ: operations,
// extents, leading dimensions and calls, shared by the f32 and bf16 GEMMs. When every product
// accumulates into one C (stride_c == 0), they run one per call, one after another (a batched
// call would race), each after the first with beta = 1; otherwise one call does the batch.
struct ColumnMajor {
  cublasOperation_t op_a, op_b;
  int m, n, k;  // of the column-major product: N, M, K
  int lda, ldb, ldc;
  int64_t calls;
  int batch_per_call;
};

ColumnMajor column_major(const char* op, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                         int64_t stride_c) {
  TARN_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && batch <= INT32_MAX, op,
              ": extents beyond cuBLAS' 32-bit int: M ", M, ", N ", N, ", K ", K, ", batch ", batch);
  ColumnMajor c;
  c.op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.m = static_cast<int>(N);
  c.n = static_cast<int>(M);
  c.k = static_cast<int>(K);
  // cuBLAS refuses a leading dimension below 1 even where nothing is read (K = 0: C = beta C).
  c.lda = static_cast<int>(std::max<int64_t>(1, trans_a ? M : K));
  c.ldb = static_cast<int>(std::max<int64_t>(1, trans_b ? K : N));
  c.ldc = static_cast<int>(N);
  const bool serial = stride_c == 0 && batch > 1;
  c.calls = serial ? batch : 1;
  c.batch_per_call = serial ? 1 : static_cast<int>(batch);
  return c;
}

// Both entry points: the column-major mapping, then its cuBLAS calls, several when the batch
// shares C (each after the first adding to it: beta 1). f32 operands go through
// cublasSgemmStridedBatched; bf16 ones through cublasGemmStridedBatchedEx, f32 compute (bf16
// tensor cores on sm_80 and up, with f32 accumulation), f32 C.
template <class T>
void gemm_strided_batched(const char* op, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                          int64_t K, float alpha, const T* A, int64_t stride_a, const T* B, int64_t stride_b,
                          float beta, float* C, int64_t stride_c) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  const ColumnMajor g = column_major(op, trans_a, trans_b, batch, M, N, K, stride_c);
  cublasHandle_t h = handle();
  for (int64_t i = 0; i < g.calls; ++i) {
    const float beta_i = i > 0 ? 1.0f : beta;
    if constexpr (std::is_same_v<T, float>)
      TARN_CUBLAS_CALL(cublasSgemmStridedBatched(h, g.op_b, g.op_a, g.m, g.n, g.k, &alpha, B + i * stride_b, g.ldb,
                                                 stride_b, A + i * stride_a, g.lda, stride_a, &beta_i, C, g.ldc,
                                                 stride_c, g.batch_per_call));
    else
      TARN_CUBLAS_CALL(cublasGemmStridedBatchedEx(h, g.op_b, g.op_a, g.m, g.n, g.k, &alpha, B + i * stride_b,
                                                  CUDA_R_16BF, g.ldb, stride_b, A + i * stride_a, CUDA_R_16BF, g.lda,
                                                  stride_a, &beta_i, C, CUDA_R_32F, g.ldc, stride_c, g.batch_per_call,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t stride_a, const float* B, int64_t stride_b, float beta, float* C,
                  int64_t stride_c) {
  gemm_strided_batched("gemm_batched", trans_a, trans_b, batch, M, N, K, alpha, A, stride_a, B, stride_b, beta, C,
                       stride_c);
}

void gemm_batched_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t stride_a, const bf16* B, int64_t stride_b, float beta, float* C,
                       int64_t stride_c) {
  gemm_strided_batched("gemm_batched_bf16", trans_a, trans_b, batch, M, N, K, alpha, A, stride_a, B, stride_b, beta,
                       C, stride_c);
}

Bf16GemmEngine bf16_gemm_engine(int device) {
#if defined(__CUDACC__)
  int major = 0, minor = 0;
  TARN_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TARN_CUDA_CALL(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
  if (major >= 8) return {true, "cuBLAS bf16 tensor cores (" + sm + ")"};
  return {false, "this GPU (" + sm + ") has no bf16 tensor cores (they start at sm_80)"};
#else
  (void)device;
  return {true, "cuBLAS stand-in on the emulated device"};
#endif
}

}  // namespace tarn::kernels::TARN_CUDA_NS
