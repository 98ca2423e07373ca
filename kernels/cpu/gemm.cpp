#include "kernels/gemm.h"

#include <cblas.h>
#include <omp.h>

namespace tarn::kernels::cpu {
namespace {
// Below this many multiply-adds per product, threads split the batch and each sgemm runs on one
// thread (OpenBLAS' OpenMP build stays serial inside a parallel region); above it, products run
// one after another and OpenBLAS threads each one.
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
  const bool split_batch = batch > 1 && M * N * K < kSmallGemmMacs && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (split_batch)
  for (int64_t i = 0; i < batch; ++i) one(ta, tb, M, N, K, alpha, A + i * sa, B + i * sb, beta, C + i * sc);
}

}  // namespace tarn::kernels::cpu
