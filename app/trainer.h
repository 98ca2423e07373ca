#pragma once
// `tarn train`: the training loop. Reads the recipe, builds tokenizer, data, model and
// optimizer, resumes from the newest valid checkpoint in checkpoints.dir (unless told to
// restart), then steps until max_steps, max_epochs, max_time_minutes, early stopping, K
// non-finite steps in a row, or SIGINT/SIGTERM; validates, checkpoints and logs on the way.
//
// Data-parallel (recipes/README.md, "Several ranks"): every rank walks the same global
// batches and trains on its share of each one's rows; gradients are summed across ranks once
// per optimizer step and every rank applies the same update. Every decision one rank could
// take alone (skip a non-finite step, stop on a signal or the time budget, validation and
// early stopping, checkpoints) is agreed through a collective first. Rank 0 alone logs,
// writes metrics and checkpoints.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/collectives.h"
#include "app/evaluate.h"

namespace tarn::app {

struct TrainOptions {
  std::string recipe_path;
  std::vector<std::string> overrides;  // --set key=value
  bool restart = false;                // ignore checkpoints already in checkpoints.dir
  // The ranks of a data-parallel run. Null: the MPI world when an MPI launcher started this
  // process as one of several ranks (kernels/mpi/mpi.h), else one rank that communicates
  // nothing. Tests hand in thread-group or solo communicators.
  kernels::Communicator* communicator = nullptr;
};

struct TrainSummary {
  int64_t steps = 0;             // the step count reached (over all runs)
  int64_t steps_this_run = 0;
  std::string stop_reason;       // "max_steps", "max_time", "signal", ...
  std::string checkpoint;        // the last checkpoint written
  double train_loss = 0;         // mean loss of the last logging interval
  double tokens_per_s = 0;       // source + target tokens per second over this run (all ranks)
  double comm_s = 0;             // this run's time in the gradient all-reduce (exposed)
  int64_t buckets_started_early = 0;  // gradient buckets started during a backward, this run
  double wall_s = 0;             // this run
  std::optional<EvalResult> valid, test;
  bool failed = false;           // stopped by non-finite steps
  int64_t live_peak_bytes = 0;   // at the last validation: the allocator's live high water on the device
  int64_t rss_peak_bytes = 0;    // and the process's resident peak (VmHWM)
};

TrainSummary train(const TrainOptions& options);

}  // namespace tarn::app
