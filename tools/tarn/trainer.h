#pragma once
// `tarn train`: the training loop. Reads the recipe, builds tokenizer, data, model and
// optimizer, resumes from the newest valid checkpoint in checkpoints.dir (unless told to
// restart), then steps until max_steps, max_epochs, max_time_minutes, early stopping, K
// non-finite steps in a row, or SIGINT/SIGTERM; validates, checkpoints and logs on the way.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/tarn/evaluate.h"

namespace tarn::app {

struct TrainOptions {
  std::string recipe_path;
  std::vector<std::string> overrides;  // --set key=value
  bool restart = false;                // ignore checkpoints already in checkpoints.dir
};

struct TrainSummary {
  int64_t steps = 0;             // the step count reached (over all runs)
  int64_t steps_this_run = 0;
  std::string stop_reason;       // "max_steps", "max_time", "signal", ...
  std::string checkpoint;        // the last checkpoint written
  double train_loss = 0;         // mean loss of the last logging interval
  double tokens_per_s = 0;       // source + target tokens per second over this run
  double wall_s = 0;             // this run
  std::optional<EvalResult> valid, test;
  bool failed = false;           // stopped by non-finite steps
};

TrainSummary train(const TrainOptions& options);

}  // namespace tarn::app
