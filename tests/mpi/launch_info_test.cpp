// What launch_info() reads from the environment, and the lifetime calls of a process MPI never
// started in. Single-process tests (ctest runs them one by one, outside mpiexec).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "kernels/mpi/mpi.h"

namespace tarn::kernels {
namespace {

// Sets the launcher variables a test names and clears the rest; restores all afterwards.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::map<std::string, std::string>& set) {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
    for (const auto& [name, value] : set) setenv(name.c_str(), value.c_str(), 1);
  }
  ~LauncherEnv() {
    for (const char* name : kNames) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  static constexpr const char* kNames[] = {
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
      "PMIX_RANK",            "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",               "SLURM_LOCALID",
      "PMI_RANK",             "PMI_SIZE",             "MPI_LOCALRANKID",            "MPI_LOCALNRANKS"};
  std::map<std::string, std::string> saved_;
};

TEST(MpiLaunch, NoLauncherVariablesMeanOneRankAlone) {
  const LauncherEnv env({});
  const mpi::LaunchInfo info = mpi::launch_info();
  EXPECT_FALSE(info.launched);
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_world, 1);
  EXPECT_EQ(info.launcher, "");
  EXPECT_FALSE(mpi::initialized());  // reading the environment starts nothing
  EXPECT_THROW(mpi::local_rank(), Error);
}

TEST(MpiLaunch, OpenMpiVariablesGiveRankWorldAndLocalRank) {
  const LauncherEnv env({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  const mpi::LaunchInfo info = mpi::launch_info();
  EXPECT_TRUE(info.launched);
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world, 2);
  EXPECT_EQ(info.launcher, "Open MPI");
  EXPECT_EQ(mpi::local_rank(), 1);
}

TEST(MpiLaunch, OneRankUnderALauncherIsNotLaunched) {
  const LauncherEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_FALSE(mpi::launch_info().launched);
  EXPECT_EQ(mpi::launch_info().launcher, "Open MPI");
}

TEST(MpiLaunch, PmixTakesTheSizesFromSlurm) {
  const LauncherEnv env({{"PMIX_RANK", "5"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_LOCALID", "1"}});
  const mpi::LaunchInfo info = mpi::launch_info();
  EXPECT_TRUE(info.launched);
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world, 1);  // unknown: assume the machine is this rank's alone
  EXPECT_EQ(info.launcher, "PMIx");
}

TEST(MpiLaunch, PmiVariablesOfHydra) {
  const LauncherEnv env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  const mpi::LaunchInfo info = mpi::launch_info();
  EXPECT_TRUE(info.launched);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world, 2);
  EXPECT_EQ(info.local_world, 2);
  EXPECT_EQ(info.launcher, "PMI");
}

TEST(MpiLaunch, MalformedVariablesAreErrorsNamingThem) {
  {
    const LauncherEnv env({{"OMPI_COMM_WORLD_RANK", "one"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
    try {
      mpi::launch_info();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK=\"one\""), std::string::npos) << e.what();
    }
  }
  const LauncherEnv env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_THROW(mpi::launch_info(), Error);
}

TEST(MpiLaunch, WithoutMpiFinalizeDoesNothingAndAbortExitsWithTheCode) {
  EXPECT_FALSE(mpi::initialized());
  mpi::finalize();
  EXPECT_FALSE(mpi::initialized());
  EXPECT_EXIT(mpi::abort(3), ::testing::ExitedWithCode(3), "");
  EXPECT_THROW(mpi::world_communicator(0), Error);
}

}  // namespace
}  // namespace tarn::kernels
