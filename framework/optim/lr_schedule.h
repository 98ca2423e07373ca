#pragma once
// Learning-rate schedules: a linear warm-up from 0 to `lr` over `warmup_steps`, then a decay.
//
// `step` counts the optimizer updates already done (0 for the first one), as HuggingFace's
// LambdaLR schedules and fairseq's num_updates do, so lr_at(0) is 0 when there is a warm-up:
//   opt.set_lr(schedule.lr_at(opt.step_count())); opt.step();
//
//   constant      lr after warm-up
//   linear        lr down to min_lr at total_steps, linearly (HF get_linear_schedule_with_warmup)
//   cosine        lr down to min_lr at total_steps along half a cosine (HF get_cosine_schedule_with_warmup)
//   inverse_sqrt  lr * sqrt(warmup_steps) / sqrt(step), never below min_lr (fairseq inverse_sqrt)
// Past total_steps, linear and cosine stay at min_lr.
#include <cstdint>
#include <string>

namespace tarn {

enum class LrScheduleKind { constant, linear, cosine, inverse_sqrt };

// "constant", "linear", "cosine", "inverse_sqrt"; anything else throws, listing those.
LrScheduleKind parse_lr_schedule_kind(const std::string& name);
const char* lr_schedule_kind_name(LrScheduleKind kind);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  float lr = 1e-3f;           // the peak, reached at the end of warm-up
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;    // end of the decay (linear, cosine); ignored by the others
  float min_lr = 0.0f;        // the floor the decay ends at

  // Throws naming the offending field: lr < 0, min_lr outside [0, lr], warmup < 0, or (linear,
  // cosine) total_steps < warmup_steps or total_steps < 1.
  void validate() const;
  float lr_at(int64_t step) const;
};

}  // namespace tarn
