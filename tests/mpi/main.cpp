// main() of tarn_mpi_tests. The MpiJob tests run as one MPI job (ctest starts the binary under
// mpiexec, tests/CMakeLists.txt); MPI must outlive all of them, so it is finalised after
// RUN_ALL_TESTS. Rank 0 prints gtest's usual report; the other ranks print only their failures,
// each line tagged with the rank, so two ranks' reports do not interleave.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/blas_info.h"
#include "kernels/mpi/mpi.h"

namespace {

class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::fprintf(stderr, "[rank %d] FAILED %s.%s at %s:%d\n%s\n", rank_, test ? test->test_suite_name() : "?",
                 test ? test->name() : "?", result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tarn::kernels::restart_with_better_blas_kernels(argv);  // tests/gtest_main.cpp says why
  ::testing::InitGoogleTest(&argc, argv);
  const tarn::kernels::mpi::LaunchInfo launch = tarn::kernels::mpi::launch_info();
  if (launch.launched && launch.rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(launch.rank));
  }
  const int result = RUN_ALL_TESTS();
  tarn::kernels::mpi::finalize();
  return result;
}
