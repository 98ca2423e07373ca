#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/blas_info.h"

TEST(BlasInfo, TheOpenMPBuildOfOpenBLASIsLoaded) {
  const auto info = tarn::kernels::blas_info();
  EXPECT_TRUE(info.is_openmp()) << info.str();
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.str();
}

namespace {
tarn::kernels::CpuVectorSupport cpu(bool amd, int level) {  // level: 0 SSE, 1 AVX, 2 AVX2, 3 AVX-512, 4 +BF16
  tarn::kernels::CpuVectorSupport c;
  c.amd = amd;
  c.avx = level >= 1;
  c.avx2_fma = level >= 2;
  c.avx512 = level >= 3;
  c.avx512_bf16 = level >= 4;
  return c;
}
}  // namespace

TEST(BlasInfo, AnUnknownCpuGetsTheBestKernelsItCanRunInsteadOfPrescott) {
  using tarn::kernels::better_blas_coretype;
  // Debian 12's OpenBLAS 0.3.21 on an Emerald Rapids Xeon (family 6, model 207): Prescott.
  EXPECT_EQ(better_blas_coretype("Prescott", cpu(false, 4)), "Cooperlake");
  EXPECT_EQ(better_blas_coretype("Prescott", cpu(false, 3)), "SkylakeX");
  EXPECT_EQ(better_blas_coretype("Nehalem", cpu(false, 2)), "Haswell");
  EXPECT_EQ(better_blas_coretype("Barcelona", cpu(true, 2)), "Zen");
  EXPECT_EQ(better_blas_coretype("Core2", cpu(false, 1)), "Sandybridge");
  EXPECT_EQ(better_blas_coretype("Haswell", cpu(false, 3)), "SkylakeX");  // an AVX-512 CPU it thinks is Haswell
}

TEST(BlasInfo, AKnownCpuKeepsOpenBlasOwnChoice) {
  using tarn::kernels::better_blas_coretype;
  EXPECT_EQ(better_blas_coretype("Zen", cpu(true, 2)), "");              // Zen 3
  EXPECT_EQ(better_blas_coretype("Cooperlake", cpu(true, 4)), "");       // Zen 4
  EXPECT_EQ(better_blas_coretype("SkylakeX", cpu(false, 3)), "");
  EXPECT_EQ(better_blas_coretype("SapphireRapids", cpu(false, 4)), "");  // better than our pick
  EXPECT_EQ(better_blas_coretype("COOPERLAKE", cpu(false, 4)), "");      // names compare without case
  EXPECT_EQ(better_blas_coretype("Prescott", cpu(false, 0)), "");        // nothing better to run
}

TEST(BlasInfo, TheKernelsInUseAreTheBestThisCpuCanRunUnlessTheUserChose) {
  // The suites' main() restarts them with better kernels where OpenBLAS does not know the CPU.
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr && std::getenv("TARN_BLAS_CORE_DETECTED") == nullptr)
    GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's choice";
  const auto info = tarn::kernels::blas_info();
  EXPECT_EQ(tarn::kernels::better_blas_coretype(info.core, tarn::kernels::CpuVectorSupport::of_this_cpu()), "")
      << info.str();
}
