#pragma once
// What a training run reports as it goes (rank 0 writes; docs/design.md, "What a run logs"):
//   - a progress line on stderr every logging.every_steps, averaged over the steps since the
//     last one: step, epoch, loss, perplexity, lr, gradient norm, tokens per second, time, ETA;
//   - the same facts as one JSON object per logged step ("kind": "train") and per validation
//     ("valid"), a line each, appended to logging.metrics_file; a metric that is not finite
//     (an overflowed perplexity) is null;
//   - the same scalars as TensorBoard events in logging.tensorboard (framework/log/tensorboard.h):
//     train/{loss,nll,ppl,lr,grad_norm,tokens_per_s} and memory/rss_mib per logged step,
//     valid/{nll,ppl} and memory/{rss_peak_mib,live_peak_mib} per validation, test/{nll,ppl}.
// The event file is a view of the run, not the run: a write that fails (a full disk, a folder
// removed) is said once and ends the event file, never the training.
#include <cstdint>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/allocator.h"
#include "app/recipe/recipe.h"
#include "framework/device.h"
#include "framework/log/tensorboard.h"
#include "framework/train/step.h"
#include "app/evaluate.h"
#include "app/progress.h"

namespace tarn::app {

// logging.tensorboard as a folder: "" when it is off.
std::string tensorboard_folder(const Recipe& recipe);

// One validation, as reported.
struct ValidationReport {
  EvalResult result;
  bool best = false;        // the lowest NLL so far
  double seconds = 0;       // the evaluation's own time
  MemoryStats memory;       // the training device's allocator so far
  ResidentMemory resident;  // the process's
};

class TrainMetrics {
 public:
  // Opens logging.metrics_file for appending (its folder created) and, unless it is off, the
  // TensorBoard folder at `step` (a resumed run's event files lose the events after it, which
  // is said). A ConfigError at the key when either cannot be opened. Rank 0 alone calls it:
  // the others print and write nothing but the progress line's log call.
  void open(const Recipe& recipe, int64_t step);
  bool has_tensorboard() const { return tensorboard_ != nullptr; }
  // The run's first line: from which step, on how many training examples, where metrics go.
  void log_start(int64_t step, long long examples, const Recipe& recipe) const;

  // This run's counts and the first interval start now.
  void start();
  // A step taken (applied, or deferred with its result unknown) at learning rate `lr`.
  void took_step(float lr) { lr_ = lr; }
  // An applied step's agreed figures, `counted` target labels over every rank.
  void add(const StepResult& r, int64_t counted);
  int64_t tokens_this_run() const { return tokens_this_run_; }  // source + target, every rank

  // A skipped step (rank 0 says it): its number, why, and how many in a row of the `max_bad`
  // that stop the run.
  void log_skipped(int64_t number, StepOutcome outcome, int64_t in_row, int64_t max_bad) const;
  // The progress line, a "train" metrics line and its scalars over the steps added since the
  // last one, at progress.step; then a new interval. Returns the interval's mean loss, or
  // nothing (and says nothing) when no step was added since. `t` bounds the ETA.
  std::optional<double> log_interval(const Progress& progress, const TrainingRecipe& t, double elapsed_s);
  // The validation line, a "valid" metrics line and its scalars. `device` is the training device.
  void log_validation(const Progress& progress, const ValidationReport& v, double elapsed_s, Device device);
  // The test set's scalars and line at the end of a run; `data` names the file.
  void log_test(int64_t step, const EvalResult& r, const std::string& data);

 private:
  using Clock = std::chrono::steady_clock;
  void write(const json::Json& line);
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);

  struct Interval {  // what the progress line averages over
    double loss_sum = 0, nll_sum = 0;
    int64_t nll_tokens = 0, steps = 0, tokens = 0;
    double grad_norm_sum = 0;
    Clock::time_point start = Clock::now();
  };
  std::unique_ptr<std::ofstream> file_;             // rank 0's metrics file
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0's, unless logging.tensorboard is off
  Interval interval_;
  float lr_ = 0;  // of the last step taken
  int64_t tokens_this_run_ = 0;
};

}  // namespace tarn::app
