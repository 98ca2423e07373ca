// Who launched this process, and MPI's lifetime: launch_info() reads only the environment, so a
// plain run never loads MPI's machinery; init, finalize and abort (kernels/mpi/mpi.h).
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kernels/mpi/mpi.h"
#include "kernels/mpi/mpi_call.h"

namespace tarn::kernels::mpi {
namespace {

std::atomic<int> g_split_local_rank{-1};

// The integer in environment variable `name`, or `fallback` when it is unset. A value that is
// not a whole number is an error naming the variable (a broken launcher, not a plain run).
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  TARN_CHECK(errno == 0 && *end == '\0' && value >= 0 && value <= 1 << 30, "environment: ", name, "=\"", text,
             "\" is not a rank or a rank count");
  return static_cast<int>(value);
}

bool env_set(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0';
}

bool mpi_up() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

}  // namespace

namespace detail {

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str_cat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

void init_once() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int initialised = 0, finalised = 0;
  TARN_MPI_CALL(MPI_Finalized(&finalised));
  TARN_CHECK(!finalised, "MPI was already finalised in this process and cannot start again");
  TARN_MPI_CALL(MPI_Initialized(&initialised));
  if (!initialised) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    TARN_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (error ", rc, "): was this process started by mpirun?");
    TARN_CHECK(provided >= MPI_THREAD_FUNNELED, "MPI_Init_thread: this MPI provides thread level ", provided,
               ", below MPI_THREAD_FUNNELED (collectives run on the main thread while OpenMP threads compute)");
  }
  TARN_MPI_CALL(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

void set_split_local_rank(int local_rank) { g_split_local_rank = local_rank; }

}  // namespace detail

namespace {

// launch_info() with the local figures left at -1 where the environment does not give them.
LaunchInfo read_launch_env() {
  LaunchInfo info;
  info.local_rank = info.local_world = -1;
  if (env_set("OMPI_COMM_WORLD_RANK")) {  // mpirun/mpiexec of Open MPI
    info.launcher = "Open MPI";
    info.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    info.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    info.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    info.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
  } else if (env_set("PMIX_RANK")) {  // srun --mpi=pmix: PMIx gives the rank, Slurm the sizes
    info.launcher = "PMIx";
    info.rank = env_int("PMIX_RANK", 0);
    info.world = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
    info.local_rank = env_int("SLURM_LOCALID", -1);
  } else if (env_set("PMI_RANK")) {  // MPICH's Hydra and other PMI-1/2 launchers
    info.launcher = "PMI";
    info.rank = env_int("PMI_RANK", 0);
    info.world = env_int("PMI_SIZE", 1);
    info.local_rank = env_int("MPI_LOCALRANKID", -1);
    info.local_world = env_int("MPI_LOCALNRANKS", -1);
  }
  TARN_CHECK(info.world >= 1 && info.rank < info.world, "environment (", info.launcher, "): rank ", info.rank,
             " is not a rank of a job of ", info.world);
  info.launched = info.world > 1;
  return info;
}

}  // namespace

int detail::env_local_rank() { return read_launch_env().local_rank; }

LaunchInfo launch_info() {
  LaunchInfo info = read_launch_env();
  // Unknown local figures: the conservative guess is that this rank has the machine to itself.
  if (info.local_rank < 0) info.local_rank = 0;
  if (info.local_world < 1) info.local_world = 1;
  return info;
}

int local_rank() {
  const LaunchInfo info = read_launch_env();
  if (info.local_rank >= 0) return info.local_rank;
  const int split = g_split_local_rank;
  TARN_CHECK(split >= 0, "local_rank: the environment does not say (", info.launcher.empty() ? "no launcher" : info.launcher,
             " set no local rank) and world_communicator has not run to ask MPI");
  return split;
}

bool initialized() { return mpi_up(); }

void finalize() {
  if (mpi_up()) MPI_Finalize();
}

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // MPI_Abort makes mpirun kill every rank of the job, so none waits for this one forever.
  if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace tarn::kernels::mpi
