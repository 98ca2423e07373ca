// main() of every GoogleTest suite but the MPI ones (which have their own): GoogleTest's, after
// giving OpenBLAS the kernels this CPU can run when it does not know the CPU (kernels/blas_info.h).
// On an Emerald Rapids Xeon, Debian's OpenBLAS would run its SSE3 kernels, and the suites with
// it: the same results, several times slower.
#include <gtest/gtest.h>

#include "kernels/blas_info.h"

int main(int argc, char** argv) {
  tarn::kernels::restart_with_better_blas_kernels(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
