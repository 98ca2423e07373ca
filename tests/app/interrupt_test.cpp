// What happens to a training run that is stopped from outside: SIGINT/SIGTERM finish the step
// and write a checkpoint; SIGKILL at any instant of a checkpoint write leaves the previous
// checkpoint loadable, and the next run resumes from it bit for bit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include "framework/io/checkpoint_dir.h"
#include "framework/io/safetensors.h"
#include "tests/app/app_test_util.h"
#include "app/checkpoint_state.h"
#include "app/trainer.h"

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
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << " instead of stopping cleanly";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const auto latest = latest_valid_checkpoint(dir + "/run");
  ASSERT_TRUE(latest.has_value()) << "the stop wrote no checkpoint";
  const int64_t saved = checkpoint_progress(*latest).step;
  EXPECT_GE(saved, seen);
  EXPECT_EQ(saved, last_logged_step(metrics)) << "the checkpoint is not the last step the run finished";
  EXPECT_EQ(list_checkpoints(dir + "/run").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(IntAndTerm, StopSignal, ::testing::Values(SIGINT, SIGTERM));

// The instants of the checkpoint write protocol a run passes through (set_checkpoint_crash_hook),
// recorded in order; and the one at which a child process is to die.
std::vector<std::string> g_instants;
size_t g_kill_at = 0;

void record_instant(const std::string& instant) { g_instants.push_back(instant); }
void kill_at_instant(const std::string& instant) {
  g_instants.push_back(instant);
  if (g_instants.size() == g_kill_at + 1) std::raise(SIGKILL);
}

// The step of the newest checkpoint whose COMPLETE was written among instants [0, end), or -1.
int64_t last_completed_step(const std::vector<std::string>& instants, size_t end) {
  int64_t step = -1;
  const std::string marker = std::string("/") + kCompleteFile;
  for (size_t i = 0; i < end; ++i) {
    const std::string& s = instants[i];
    if (s.size() < marker.size() || s.compare(s.size() - marker.size(), marker.size(), marker) != 0) continue;
    const size_t at = s.rfind("step_");
    step = std::stoll(s.substr(at + 5));
  }
  return step;
}

// SIGKILL at every instant of the write protocol during the first three checkpoints (every file
// written, MANIFEST.json, the rename, COMPLETE, an old checkpoint moved aside for pruning): the
// newest loadable checkpoint is exactly the last one whose COMPLETE was written, no complete
// checkpoint is ever rejected as damaged, and the resumed run ends bit for bit where an
// uninterrupted one does.
TEST(Sigkill, AtEveryInstantOfACheckpointWriteTheRunResumesBitForBit) {
  constexpr int64_t kKillWithin = 3, kEnd = 5;
  auto run_to = [](const std::string& dir, int64_t steps) {
    TrainOptions o = long_run(dir);
    o.overrides.push_back("training.max_steps=" + std::to_string(steps));
    return o;
  };
  // The instants of the first kKillWithin steps, and the uninterrupted run's end state.
  const std::string counted = testing::make_tiny_corpus("sigkill_count");
  set_checkpoint_crash_hook(record_instant);
  train(run_to(counted, kKillWithin));
  set_checkpoint_crash_hook(nullptr);
  const std::vector<std::string> instants = g_instants;
  ASSERT_GE(instants.size(), 3u * kKillWithin) << "fewer crash points than files";
  const std::string reference = testing::make_tiny_corpus("sigkill_reference");
  train(run_to(reference, kEnd));
  const std::vector<float> expected = testing::final_state(reference + "/run", kEnd);

  for (size_t k = 0; k < instants.size(); ++k) {
    SCOPED_TRACE("killed at instant " + std::to_string(k) + ": " + instants[k]);
    const std::string dir = testing::make_tiny_corpus("sigkill");
    const pid_t pid = fork();
    if (pid == 0) {
      g_instants.clear();
      g_kill_at = k;
      set_checkpoint_crash_hook(kill_at_instant);
      try {
        train(run_to(dir, kEnd));
      } catch (...) {
      }
      _exit(0);  // not reached when the hook fired
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the run passed no instant " << k;
    std::vector<std::string> rejected;
    const auto latest = latest_valid_checkpoint(dir + "/run", &rejected);
    EXPECT_TRUE(rejected.empty()) << "a complete checkpoint did not load: " << rejected.front();
    const int64_t completed = last_completed_step(instants, k + 1);
    if (completed < 0) {
      EXPECT_FALSE(latest.has_value());
    } else {
      ASSERT_TRUE(latest.has_value());
      EXPECT_EQ(checkpoint_progress(*latest).step, completed);
    }
    const TrainSummary s = train(run_to(dir, kEnd));
    EXPECT_EQ(s.steps, kEnd);
    EXPECT_EQ(s.steps_this_run, kEnd - std::max<int64_t>(completed, 0));
    const std::vector<float> got = testing::final_state(dir + "/run", kEnd);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << "not bit-identical";
  }
}

}  // namespace
}  // namespace tarn::app
