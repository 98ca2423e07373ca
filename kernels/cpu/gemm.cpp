#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

namespace tarn::kernels::cpu {
namespace {
// Threads split the batch, each sgemm on one thread (OpenBLAS' OpenMP build stays serial inside a
// parallel region), below this many multiply-adds per product, and at any size once there are
// at least two products per thread. Otherwise products run one after another and OpenBLAS
// threads each one. Why the second rule: OpenBLAS threads a product with few rows and a short
// inner dimension badly. Aligned cross-attention's chunk mixing, 4 products of 32 x 32 by
// 32 x 9,945, took 2.5-10.6 ms threaded on 2 Zen 3 cores against 2.9 on one; split by product,
// 1.2-1.7 ms.
constexpr int64_t kSmallGemmMacs = 1 << 21;

void one(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B, float beta,
         float* C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, ta ? static_cast<int>(M) : static_cast<int>(K), B,
              tb ? static_cast<int>(K) : static_cast<int>(N), beta, C, static_cast<int>(N));
}
}  // namespace

void gemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t sa, const float* B, int64_t sb, float beta, float* C, int64_t sc) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if (K == 0) {  // empty inner dimension: C = beta * C
    for (int64_t i = 0; i < (sc == 0 ? 1 : batch); ++i)
      for (int64_t j = 0; j < M * N; ++j) C[i * sc + j] = beta == 0.0f ? 0.0f : beta * C[i * sc + j];
    return;
  }
  if (sc == 0) {  // accumulate all products into one C
    for (int64_t i = 0; i < batch; ++i) one(ta, tb, M, N, K, alpha, A + i * sa, B + i * sb, i == 0 ? beta : 1.0f, C);
    return;
  }
  const bool split_batch = batch > 1 && !omp_in_parallel() &&
                           (M * N * K < kSmallGemmMacs || batch >= 2 * omp_get_max_threads());
#pragma omp parallel for schedule(dynamic, 1) if (split_batch)
  for (int64_t i = 0; i < batch; ++i) one(ta, tb, M, N, K, alpha, A + i * sa, B + i * sb, beta, C + i * sc);
}

}  // namespace tarn::kernels::cpu
