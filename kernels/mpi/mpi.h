#pragma once
// Open MPI as tarn's process launcher and CPU transport (kernels/collectives.h). A rank is one
// process started by mpirun/mpiexec (or srun with PMIx). Plain `tarn` never touches MPI: it
// is initialised only when launched() says a launcher started this process with more than one
// rank, so a lone run pays nothing for it.
//
// Every collective of an MPI communicator carries a sequence number and runs against a
// deadline: before the data moves, the ranks exchange (sequence, collective, size) and a
// mismatch throws a CollectiveError naming the ranks that disagree; a collective (or that
// exchange) still unfinished after timeout_s throws a CollectiveError naming this rank, the
// collective, its sequence number and size. The caller then ends the job with abort(), which
// takes every rank down (mpirun kills the rest), so no rank waits forever and none is orphaned.
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/check.h"
#include "kernels/collectives.h"

namespace tarn::kernels::mpi {

// A collective that could not complete: a rank died, hung, or called something else.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

struct LaunchInfo {
  bool launched = false;  // a launcher started this process as one of world > 1 ranks
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;  // among the ranks on this machine
  std::string launcher;                 // "Open MPI", "PMIx", "PMI", "" when none
};

// What the environment says (OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, PMIX_RANK,
// PMI_RANK/PMI_SIZE), without initialising MPI.
LaunchInfo launch_info();

// Initialises MPI (once; MPI_THREAD_FUNNELED) and returns a communicator over all ranks
// (MPI_COMM_WORLD) whose collectives time out after timeout_s seconds (> 0). The local rank
// comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) when the environment does not say.
std::unique_ptr<Communicator> world_communicator(double timeout_s);
// This process's rank among the ranks of its machine (after world_communicator).
int local_rank();

// The most values (or bytes) one MPI call of a collective moves; longer collectives run in steps
// of this size (MPI counts are int; the steps also bound the scratch a reduction needs). Tests
// shrink it to exercise the stepping on small buffers; 0 restores the default (2^22).
void set_chunk_values(int64_t values);

bool initialized();
// MPI_Finalize when initialised and not finalised; for a clean exit of every rank.
void finalize();
// Ends the whole job with `code` (MPI_Abort on the world) when MPI is initialised; else exits.
[[noreturn]] void abort(int code);

}  // namespace tarn::kernels::mpi
