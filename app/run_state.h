#pragma once
// A training run's state across processes and restarts (docs/design.md section 8): where a run
// starts (the newest checkpoint of checkpoints.dir that loads, or anew: --restart, model.init_from,
// the attention transfer stage), every rank's dropout stream, the checkpoints it writes, and its
// training time over every run of the folder.
//
// Rank 0 alone touches checkpoints.dir (cleanup, --restart, the lock, writing) and picks the
// checkpoint; every rank then loads that one (the ranks must see the same files: one machine,
// or a shared filesystem) and rank 0's parameters are broadcast, so the replicas start
// identical.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batcher.h"
#include "data/tokenizer.h"
#include "app/recipe/recipe.h"
#include "framework/io/run_lock.h"
#include "framework/train/step.h"
#include "kernels/collectives.h"
#include "layers/bart.h"
#include "app/progress.h"
#include "app/ranks.h"

namespace tarn::app {

// One rank's live objects that a checkpoint is loaded into and written from.
struct RunParts {
  const Recipe& recipe;
  const Tokenizer& tokenizer;
  BartForConditionalGeneration& model;
  TrainStep& step;  // its AdamW, or ZeRO-1's shard of the optimizer state
  Batcher& batcher;
  Progress& progress;
};

class RunState {
 public:
  // Resumes from the newest checkpoint that passes its checksums and loads (each one skipped is
  // said, with why; a changed model is refused, app/resume_check.h), or starts anew: with
  // `restart` the previous run is set aside first; a new run takes model.init_from's weights
  // and runs the attention transfer stage (linearize.steps) when the recipe asks. Then every
  // rank continues its own dropout stream and the replicas are made identical. Collective.
  void start(const RunParts& run, const Ranks& ranks, bool restart);
  // This run's clock starts: elapsed_s() counts from here, after the time of the runs before.
  void start_clock();
  // Training time over every run of this checkpoint folder: what progress.json keeps and the
  // time budget counts.
  double elapsed_s() const;
  double this_run_s() const;

  // Writes the checkpoint of progress.step (`why` goes to the log) unless this run wrote it
  // already or resumed from it. Collective on every rank (the dropout streams and ZeRO-1's
  // optimizer shards are gathered); rank 0 alone writes and prunes to checkpoints.keep_last.
  void save(const RunParts& run, const Ranks& ranks, const char* why);
  int64_t last_saved_step() const { return last_saved_step_; }  // -1: none yet
  const std::string& last_checkpoint() const { return last_checkpoint_; }  // "": none written this run

 private:
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<RunLock> lock_;  // rank 0's hold on checkpoints.dir
  int64_t last_saved_step_ = -1;
  std::string last_checkpoint_;
  double elapsed_before_ = 0;  // by the runs this one resumes
  Clock::time_point clock_start_ = Clock::now();
};

// --restart: the previous run's checkpoints move into run_dir/previous_<time>/ (nothing is
// deleted), so that a later resume cannot pick up a checkpoint of the old run. Its TensorBoard
// event files go with them (`tensorboard_dir`, "" for none): the new run starts at step 0, and
// TensorBoard shows the old one as the run previous_<time> when the event files live in run_dir.
void set_aside_previous_run(const std::string& run_dir, const std::string& tensorboard_dir);

// Rank r > 0 draws its own dropout masks: its seed is derived from the run's and the rank (rank
// 0 keeps the run's, so one rank is exactly the single-process run). A resumed run continues
// each rank's stream from the checkpoint (progress.rank_dropout); a rank the checkpoint did not
// have (more ranks than before) starts its own stream at rank 0's counter, past anything it
// drew before. The stream rank `rank` > 0 continues.
DropoutState rank_dropout_state(const Progress& progress, int rank, uint64_t run_seed);

// Every rank's dropout stream, rank r at index r (collective): what a checkpoint needs to
// resume every rank exactly. Empty on one rank.
std::vector<DropoutState> gather_rank_dropout(const DropoutState& mine, kernels::Communicator& comm);

}  // namespace tarn::app
