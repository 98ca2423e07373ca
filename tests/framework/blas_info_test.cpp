#include <gtest/gtest.h>

#include "kernels/blas_info.h"

TEST(BlasInfo, TheOpenMPBuildOfOpenBLASIsLoaded) {
  const auto info = tarn::kernels::blas_info();
  EXPECT_TRUE(info.is_openmp()) << info.str();
  EXPECT_NE(info.config.find("OpenBLAS"), std::string::npos) << info.str();
}
