#pragma once
// What the training loop decides besides the step itself (docs/design.md section 5): when to
// stop, agreed by every rank, and which periodic actions are due after a step. Model- and
// data-agnostic: it sees counts and limits only.
#include <cstdint>

#include "kernels/collectives.h"

namespace tarn {

// Why a run stops; none while it goes on. The names are what logs and summaries print.
enum class StopReason { none, sigterm, sigint, max_steps, max_epochs, max_time, bad_steps, early_stopping };
const char* stop_reason_name(StopReason reason);  // "", "SIGTERM", "SIGINT", "max_steps", ..., "non-finite"
// Interrupted by a signal: the run ends without the final validation and test.
inline bool stopped_by_signal(StopReason r) { return r == StopReason::sigterm || r == StopReason::sigint; }

struct StopLimits {
  int64_t max_steps = 0;         // 0 = none
  int64_t max_epochs = 0;        // 0 = none
  double max_time_s = 0;         // over every resumed run; 0 = none
  int64_t max_bad_steps = 5;     // non-finite or diverged steps in a row
  int64_t patience = 0;          // validations without improvement; 0 = no early stopping
};

// Where the run stands (the same on every rank, except the clock).
struct RunPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  double elapsed_s = 0;  // this rank's clock, over every resumed run
  int64_t bad_steps_in_row = 0;
  int64_t evals_without_improvement = 0;
};

// Collective on `comm`: the same answer on every rank. A signal on any rank (SIGINT or SIGTERM
// to one process) or the time budget on any rank's clock stops all of them after the same
// step; the other conditions follow from state every rank shares. In order of precedence:
// SIGTERM, SIGINT, max_steps, max_epochs, max_time, bad steps, early stopping.
StopReason agreed_stop_reason(const StopLimits& limits, const RunPosition& at, kernels::Communicator& comm);

// The periodic actions after an applied step; each every-N of 0 means never (validation and
// checkpoints then happen at the end only).
struct Cadence {
  int64_t log_every = 0;
  int64_t check_replicas_every = 0;
  int64_t validate_every = 0;
  int64_t checkpoint_every = 0;

  static bool due(int64_t step, int64_t every) { return every > 0 && step % every == 0; }
  bool logs_at(int64_t step) const { return due(step, log_every); }
  bool checks_replicas_at(int64_t step) const { return due(step, check_replicas_every); }
  bool validates_at(int64_t step) const { return due(step, validate_every); }
  bool checkpoints_at(int64_t step) const { return due(step, checkpoint_every); }
  // At the end of a run that stopped for `reason` at `step`: validate once more, unless a signal
  // cut it short or the last step validated already.
  bool validates_at_end(StopReason reason, int64_t step) const {
    return !stopped_by_signal(reason) && !validates_at(step);
  }
};

}  // namespace tarn
