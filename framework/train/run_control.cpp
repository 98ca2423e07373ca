#include "framework/train/run_control.h"

#include <csignal>

#include "framework/log/signals.h"

namespace tarn {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "";
    case StopReason::sigterm: return "SIGTERM";
    case StopReason::sigint: return "SIGINT";
    case StopReason::max_steps: return "max_steps";
    case StopReason::max_epochs: return "max_epochs";
    case StopReason::max_time: return "max_time";
    case StopReason::bad_steps: return "non-finite";
    case StopReason::early_stopping: return "early_stopping";
  }
  return "unknown";
}

StopReason agreed_stop_reason(const StopLimits& limits, const RunPosition& at, kernels::Communicator& comm) {
  // What one rank alone can see, made everyone's by one max-reduction.
  double flags[3] = {stop_requested() && stop_signal() == SIGTERM ? 1.0 : 0.0,
                     stop_requested() && stop_signal() != SIGTERM ? 1.0 : 0.0,
                     limits.max_time_s > 0 && at.elapsed_s >= limits.max_time_s ? 1.0 : 0.0};
  if (comm.world() > 1) comm.all_reduce_host(flags, 3, kernels::ReduceOp::max);
  if (flags[0] > 0) return StopReason::sigterm;
  if (flags[1] > 0) return StopReason::sigint;
  if (limits.max_steps > 0 && at.step >= limits.max_steps) return StopReason::max_steps;
  if (limits.max_epochs > 0 && at.epoch >= limits.max_epochs) return StopReason::max_epochs;
  if (flags[2] > 0) return StopReason::max_time;
  if (at.bad_steps_in_row >= limits.max_bad_steps) return StopReason::bad_steps;
  if (limits.patience > 0 && at.evals_without_improvement >= limits.patience) return StopReason::early_stopping;
  return StopReason::none;
}

}  // namespace tarn
