#pragma once
// Shared by kernels/mpi/*.cpp (not for callers: it pulls in Open MPI's <mpi.h>): checked MPI
// calls, and what the launcher and the communicator share.
#include <mpi.h>

#include <string>

#include "kernels/check.h"

namespace tarn::kernels::mpi::detail {

// MPI_Error_string of an MPI return code.
std::string error_string(int code);

// MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is already up; errors return (MPI_ERRORS_RETURN
// on MPI_COMM_WORLD) instead of aborting, so that they reach the caller as tarn::Error.
void init_once();

// This rank's local rank as the launcher's environment gives it; -1 when it does not.
int env_local_rank();

// The local rank world_communicator found with MPI_Comm_split_type, for local_rank(); -1 until then.
void set_split_local_rank(int local_rank);

}  // namespace tarn::kernels::mpi::detail

// Checks an MPI call (under MPI_ERRORS_RETURN); the message names the call and MPI's reason.
#define TARN_MPI_CALL(call)                                                                             \
  do {                                                                                                  \
    const int tarn_mpi_ = (call);                                                                       \
    TARN_CHECK(tarn_mpi_ == MPI_SUCCESS, #call, " failed: ", ::tarn::kernels::mpi::detail::error_string(tarn_mpi_), \
               " (", __FILE__, ":", __LINE__, ")");                                                     \
  } while (0)
