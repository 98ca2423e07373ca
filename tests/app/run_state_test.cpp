// A run's state across processes and restarts (app/run_state.h): where a run starts, every
// rank's dropout stream, the checkpoints it writes, and what --restart sets aside.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "data/seed.h"
#include "framework/io/checkpoint_dir.h"
#include "framework/io/run_lock.h"
#include "framework/log/tensorboard.h"
#include "kernels/collectives.h"
#include "app/optimizer_setup.h"
#include "app/run_state.h"
#include "app/session.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {
namespace fs = std::filesystem;

TEST(RunState, ARankContinuesItsStreamFromTheCheckpointOrStartsItsOwnAtRankZerosCounter) {
  Progress p;
  p.dropout = {11, 40};
  p.rank_dropout = {{11, 40}, {22, 41}};
  const DropoutState kept = rank_dropout_state(p, 1, 7);
  EXPECT_EQ(kept.seed, 22u);
  EXPECT_EQ(kept.counter, 41u);
  const DropoutState added = rank_dropout_state(p, 2, 7);  // more ranks than the checkpoint had
  EXPECT_EQ(added.seed, derive_seed(7, SeedPurpose::kDropoutRank, 2));
  EXPECT_EQ(added.counter, 40u);
  EXPECT_NE(added.seed, rank_dropout_state(Progress{}, 3, 7).seed) << "each rank its own seed";
}

TEST(RunState, EveryRanksDropoutStreamIsGatheredWithEveryBitOfItsSeed) {
  const auto solo = kernels::solo_communicator();
  EXPECT_TRUE(gather_rank_dropout({1, 2}, *solo).empty()) << "one rank keeps its stream in progress.dropout";
  auto group = kernels::cpu::thread_communicators(3);
  const auto stream = [](int r) {  // seeds wider than a double's mantissa
    return DropoutState{0xfedcba9876543210ull + static_cast<uint64_t>(r), 1000u + static_cast<uint64_t>(r)};
  };
  std::vector<std::vector<DropoutState>> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { got[static_cast<size_t>(r)] = gather_rank_dropout(stream(r), *group[static_cast<size_t>(r)]); });
  for (auto& t : threads) t.join();
  for (const auto& all : got) {
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(all[static_cast<size_t>(r)].seed, stream(r).seed);
      EXPECT_EQ(all[static_cast<size_t>(r)].counter, stream(r).counter);
    }
  }
}

void fake_checkpoint(const std::string& run_dir, int64_t step) {
  fs::create_directories(checkpoint_dir(run_dir, step));
  std::ofstream(checkpoint_dir(run_dir, step) + "/" + kCompleteFile) << "";
}

TEST(RunState, SettingAsideMovesCheckpointsBestAndEventFilesUnderANameOfTheirOwn) {
  const std::string run = testing::fresh_dir("run_state_aside");
  set_aside_previous_run(run, run);  // nothing there: nothing made
  EXPECT_TRUE(fs::is_empty(run));
  fake_checkpoint(run, 2);
  fake_checkpoint(run, 4);
  fs::create_directory_symlink("step_4", run + "/best");
  TensorBoardWriter(run, 0).scalars(1, {{"train/loss", 1.0}});
  set_aside_previous_run(run, run);
  EXPECT_TRUE(list_checkpoints(run).empty());
  EXPECT_FALSE(fs::exists(fs::symlink_status(run + "/best")));
  EXPECT_TRUE(list_event_files(run).empty());
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(run)) aside.push_back(e.path());
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside[0].filename().string().rfind("previous_", 0), 0u) << aside[0];
  EXPECT_EQ(list_checkpoints(aside[0].string()).size(), 2u);
  EXPECT_TRUE(fs::exists(fs::symlink_status(aside[0] / "best")));
  EXPECT_EQ(list_event_files(aside[0].string()).size(), 1u);
  // Within the same second, and with the event files kept where they are ("" for none).
  fake_checkpoint(run, 6);
  TensorBoardWriter(run, 0).scalars(1, {{"train/loss", 1.0}});
  set_aside_previous_run(run, "");
  EXPECT_TRUE(list_checkpoints(run).empty());
  EXPECT_EQ(list_event_files(run).size(), 1u);
  int previous = 0;
  for (const auto& e : fs::directory_iterator(run)) previous += e.path().filename().string().rfind("previous_", 0) == 0;
  EXPECT_EQ(previous, 2);
}

// One rank's objects for the tiny recipe, as the trainer builds them.
struct TinyRun {
  TinyRun(const Recipe& recipe, const Tokenizer& tok, const Dataset& data, kernels::Communicator& comm)
      : model(model_config(recipe, tok.vocab_size()), static_cast<uint64_t>(recipe.training.seed)),
        step(model, comm, comm, train_step_options(recipe)),
        batcher(data, [&] {
          BatcherConfig bc;
          bc.plan.max_tokens = recipe.training.tokens_per_batch;
          bc.seed = static_cast<uint64_t>(recipe.training.seed);
          return bc;
        }()),
        parts{recipe, tok, model, step, batcher, progress} {}
  BartForConditionalGeneration model;
  TrainStep step;
  Batcher batcher;
  Progress progress;
  RunParts parts;
};

TEST(RunState, ANewRunHoldsTheFolderSavesOnceAStepAndTheNextResumesThereUnlessRestarted) {
  const std::string dir = testing::make_tiny_corpus("run_state_start");
  const Recipe recipe = load_recipe(testing::tiny_recipe(), testing::tiny_overrides(dir, 4));
  const std::string run_dir = recipe.checkpoints.dir;
  const Tokenizer tok = open_tokenizer(recipe);
  const auto data = open_dataset(recipe, tok, recipe.data.train, static_cast<uint64_t>(recipe.training.seed), "train");
  const auto comm = kernels::solo_communicator();
  const Ranks ranks(comm.get(), 60);
  DataPosition after_one;
  {
    TinyRun a(recipe, tok, *data, *comm);
    RunState state;
    state.start(a.parts, ranks, false);
    EXPECT_EQ(a.progress.step, 0);
    EXPECT_EQ(state.last_saved_step(), -1);
    EXPECT_THROW(RunLock again(run_dir), Error) << "rank 0 holds checkpoints.dir while it runs";
    a.batcher.next();
    a.progress.data = after_one = a.batcher.position();
    a.progress.step = 1;
    state.save(a.parts, ranks, "test");
    EXPECT_EQ(state.last_checkpoint(), checkpoint_dir(run_dir, 1));
    EXPECT_EQ(state.last_saved_step(), 1);
    EXPECT_TRUE(fs::exists(checkpoint_dir(run_dir, 1) + "/" + kCompleteFile));
  }
  {
    TinyRun b(recipe, tok, *data, *comm);
    RunState state;
    state.start(b.parts, ranks, false);
    EXPECT_EQ(b.progress.step, 1);
    EXPECT_EQ(b.batcher.position(), after_one) << "the data cursor resumes too";
    EXPECT_EQ(state.last_saved_step(), 1);
    state.save(b.parts, ranks, "test");
    EXPECT_EQ(state.last_checkpoint(), "") << "the checkpoint it resumed from is not written again";
  }
  {
    TinyRun c(recipe, tok, *data, *comm);
    RunState state;
    state.start(c.parts, ranks, true);
    EXPECT_EQ(c.progress.step, 0);
    EXPECT_EQ(state.last_saved_step(), -1);
    EXPECT_TRUE(list_checkpoints(run_dir).empty()) << "--restart sets the previous run aside";
  }
}

}  // namespace
}  // namespace tarn::app
