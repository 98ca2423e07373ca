// What happens to a training run that is stopped from outside: SIGINT/SIGTERM finish the step
// and write a checkpoint; SIGKILL at any instant (also mid-checkpoint) leaves the previous
// checkpoint loadable, and the next run resumes from it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <thread>

#include "framework/io/checkpoint_dir.h"
#include "tests/app/app_test_util.h"
#include "tools/tarn/checkpoint_state.h"
#include "tools/tarn/trainer.h"

namespace tarn::app {
namespace {

TrainOptions long_run(const std::string& dir) {
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, 100000);
  o.overrides.insert(o.overrides.end(), {"checkpoints.every_steps=1", "checkpoints.keep_last=2",
                                         "validation.every_steps=0", "training.threads=1"});
  return o;
}

// Runs train() in a child process; returns its pid.
pid_t start_training(const TrainOptions& o) {
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      train(o);
      _exit(0);
    } catch (...) {
      _exit(1);
    }
  }
  return pid;
}

// Waits until the run folder holds a complete checkpoint at or past `step` (or times out).
bool wait_for_checkpoint(const std::string& run, int64_t step, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    const auto list = list_checkpoints(run);
    if (!list.empty() && list.back().step >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class StopSignal : public ::testing::TestWithParam<int> {};

// The step of the last "train" line of metrics.jsonl (logged every step), or -1.
int64_t last_logged_step(const std::string& metrics) {
  std::ifstream in(metrics);
  std::string line;
  int64_t step = -1;
  const std::string key = "\"kind\":\"train\",\"step\":";
  while (std::getline(in, line)) {
    const size_t at = line.find(key);
    if (at != std::string::npos) step = std::stoll(line.substr(at + key.size()));
  }
  return step;
}

// Periodic checkpoints are off, so the only checkpoint there can be is the one the signal
// handler's clean stop writes: it must hold the step in progress when the signal came (the
// last step logged, at or past the one seen before the signal).
TEST_P(StopSignal, FinishesTheStepWritesACheckpointAndExitsCleanly) {
  const std::string dir = testing::make_tiny_corpus(std::string("signal_") + std::to_string(GetParam()));
  TrainOptions o = long_run(dir);
  o.overrides.insert(o.overrides.end(), {"checkpoints.every_steps=0", "logging.every_steps=1"});
  const pid_t pid = start_training(o);
  const std::string metrics = dir + "/run/metrics.jsonl";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (last_logged_step(metrics) < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t seen = last_logged_step(metrics);
  ASSERT_GE(seen, 3) << "training never reached step 3";
  EXPECT_TRUE(list_checkpoints(dir + "/run").empty()) << "a checkpoint before the signal: periodic ones are off";
  kill(pid, GetParam());
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by the signal instead of stopping cleanly";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto latest = latest_valid_checkpoint(dir + "/run");
  ASSERT_TRUE(latest.has_value()) << "the stop wrote no checkpoint";
  const int64_t saved = checkpoint_progress(*latest).step;
  EXPECT_GE(saved, seen);
  EXPECT_EQ(saved, last_logged_step(metrics)) << "the checkpoint is not the last step the run finished";
  EXPECT_EQ(list_checkpoints(dir + "/run").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(IntAndTerm, StopSignal, ::testing::Values(SIGINT, SIGTERM));

TEST(Sigkill, AtAnyInstantLeavesALoadableCheckpointAndTheRunResumes) {
  const std::string dir = testing::make_tiny_corpus("sigkill");
  // Checkpoints every step, so a kill after a few steps very likely lands inside a write; the
  // delays vary so that different instants of the write protocol get hit.
  for (int attempt = 0; attempt < 4; ++attempt) {
    const pid_t pid = start_training(long_run(dir));
    ASSERT_TRUE(wait_for_checkpoint(dir + "/run", 2 + attempt * 2, 120));
    std::this_thread::sleep_for(std::chrono::milliseconds(7 * attempt));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::vector<std::string> rejected;
    const auto latest = latest_valid_checkpoint(dir + "/run", &rejected);
    ASSERT_TRUE(latest.has_value()) << "no loadable checkpoint after SIGKILL " << attempt;
    EXPECT_NO_THROW(open_checkpoint(latest->dir, true));
  }
  TrainOptions o = long_run(dir);
  const int64_t resume_from = checkpoint_progress(*latest_valid_checkpoint(dir + "/run")).step;
  o.overrides.push_back("training.max_steps=" + std::to_string(resume_from + 2));
  const TrainSummary s = train(o);
  EXPECT_EQ(s.steps_this_run, 2);
  EXPECT_EQ(s.steps, resume_from + 2);
}

}  // namespace
}  // namespace tarn::app
