// tarn_mpi_faults: an MPI job in which one rank misbehaves, run by tests/mpi/run_fault.sh under
// mpiexec -np 2. Like tarn's main (tools/tarn/main.cpp), a rank that catches a CollectiveError
// prints it and ends the whole job with mpi::abort, so the job must end, non-zero, within the
// communicator's deadline plus start-up, with the survivor's message on stderr.
//   tarn_mpi_faults <early-exit|sleep|mismatch> <timeout_s>
//     early-exit  rank 1 leaves (std::_Exit(0)) before the second all-reduce
//     sleep       rank 1 sleeps timeout_s + 5 s before it
//     mismatch    rank 1 passes n = 5 where rank 0 passes n = 4
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/mpi/mpi.h"

int main(int argc, char** argv) {
  namespace mpi = tarn::kernels::mpi;
  if (argc != 3) {
    std::fprintf(stderr, "usage: tarn_mpi_faults <early-exit|sleep|mismatch> <timeout_s>\n");
    return 2;
  }
  const std::string fault = argv[1];
  const double timeout_s = std::atof(argv[2]);
  try {
    const auto comm = mpi::world_communicator(timeout_s);
    std::vector<float> values(1000, 1.0f);
    comm->all_reduce_sum(values.data(), 1000);  // everyone is here and MPI works
    if (comm->rank() == 1) {
      if (fault == "early-exit") std::_Exit(0);
      if (fault == "sleep") std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s + 5));
    }
    const int64_t n = fault == "mismatch" && comm->rank() == 1 ? 5 : 4;
    comm->all_reduce_sum(values.data(), n);
    std::fprintf(stderr, "tarn_mpi_faults: rank %d: the second all-reduce completed\n", comm->rank());
  } catch (const mpi::CollectiveError& e) {
    std::fprintf(stderr, "tarn_mpi_faults: %s\n", e.what());
    mpi::abort(4);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tarn_mpi_faults: unexpected error: %s\n", e.what());
    mpi::abort(1);
  }
  mpi::finalize();
  return 0;
}
