// The tile GEMM behind the attention kernels, on both instruction sets it can run (the
// build's, and the run-time AVX-512 tiles where the CPU has them), against a double loop.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/linear_attention_simd.h"
#include "tests/attention/isa.h"
#include "tests/attention/reference.h"

namespace tarn::attention_test {
namespace {

namespace simd = kernels::cpu::simd;
using simd::Tri;

TEST(TileGemm, MatchesDoubleReferenceForEveryTriangleModeStrideAndIsa) {
  const int64_t L = simd::kLanes;
  int checked = 0;
  for (bool avx512 : isa_settings()) {
    const Avx512Tiles isa(avx512);
    for (int64_t M : {1, 5, 8, 13, 64, 70})
      for (int64_t N : {L, 2 * L, 3 * L, 8 * L + L})
        for (int64_t K : {1, 7, 64})
          for (Tri tri : {Tri::none, Tri::lower_out, Tri::lower_k, Tri::upper_k})
            for (bool transposed : {false, true})
              for (bool accumulate : {false, true}) {
                // The square modes index A's columns (or C's) by row: keep K = M (or N >= M).
                const bool square_k = tri == Tri::lower_k || tri == Tri::upper_k;
                const int64_t k_dim = square_k ? M : K;
                const int64_t lda = transposed ? M + 3 : k_dim + 2;  // strided on purpose
                Floats a = normal_floats(transposed ? k_dim * lda : M * lda, 1);
                auto A = [&](int64_t i, int64_t k) -> float& {
                  return transposed ? a[k * lda + i] : a[i * lda + k];
                };
                for (int64_t i = 0; i < M; ++i)  // zero where the mode promises zeros
                  for (int64_t k = 0; k < k_dim; ++k)
                    if ((tri == Tri::lower_k && k > i) || (tri == Tri::upper_k && k < i)) A(i, k) = 0;
                const int64_t ldb = N + L, ldc = N + 2 * L;
                const Floats b = normal_floats(k_dim * ldb, 2);
                Floats c = normal_floats(M * ldc, 3);
                const Floats c0 = c;
                const simd::MatA op = transposed ? simd::transpose_of(a.data(), lda)
                                                 : simd::rows_of(a.data(), lda);
                simd::gemm(M, N, k_dim, op, b.data(), ldb, c.data(), ldc, accumulate, tri);
                double err = 0.0, scale = 0.0;
                for (int64_t i = 0; i < M; ++i)
                  for (int64_t j = 0; j < N; ++j) {
                    if (tri == Tri::lower_out && j > i) continue;  // unspecified there
                    double ref = accumulate ? c0[i * ldc + j] : 0.0;
                    for (int64_t k = 0; k < k_dim; ++k) ref += double(A(i, k)) * b[k * ldb + j];
                    err = std::max(err, std::abs(c[i * ldc + j] - ref));
                    scale = std::max(scale, std::abs(ref));
                  }
                // Padding columns of C beyond N stay untouched.
                for (int64_t i = 0; i < M; ++i)
                  for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
                ASSERT_LE(err, 1e-5 * std::max(1.0, scale))
                    << "avx512 " << avx512 << " M " << M << " N " << N << " K " << k_dim
                    << " tri " << int(tri) << " transposed " << transposed << " acc " << accumulate;
                ++checked;
              }
  }
  EXPECT_GT(checked, 0);
}

TEST(TileGemm, Avx512SwitchIsHonouredAndRestorable) {
  const bool before = simd::avx512_tiles_enabled();
  {
    const Avx512Tiles off(false);
    EXPECT_FALSE(simd::avx512_tiles_enabled());
  }
  EXPECT_EQ(simd::avx512_tiles_enabled(), before);
  const Avx512Tiles on(true);
  EXPECT_EQ(simd::avx512_tiles_enabled(), simd::avx512_tiles_available());
}

}  // namespace
}  // namespace tarn::attention_test
