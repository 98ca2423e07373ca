#include "framework/io/run_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "kernels/check.h"

namespace tarn {
namespace {

TEST(RunLock, ASecondHolderIsRefusedWithTheFirstOnesProcessUntilItLetsGo) {
  const std::string dir = (std::filesystem::temp_directory_path() / "tarn_run_lock_test").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto first = std::make_unique<RunLock>(dir);
  try {
    RunLock second(dir);  // flock locks belong to the open file: a second open conflicts in-process too
    ADD_FAILURE() << "a second lock on " << dir << " was granted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("another tarn train (process " + std::to_string(::getpid()) + ") is using " + dir), std::string::npos)
        << m;
    EXPECT_NE(m.find("set another checkpoints.dir"), std::string::npos) << m;
  }
  first.reset();
  EXPECT_NO_THROW(RunLock again(dir));
  EXPECT_THROW(RunLock missing(dir + "/no/such/folder"), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tarn
