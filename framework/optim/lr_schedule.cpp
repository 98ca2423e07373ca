#include "framework/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "kernels/check.h"

namespace tarn {
namespace {

constexpr double kPi = 3.14159265358979323846;

struct KindName {
  LrScheduleKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {{LrScheduleKind::constant, "constant"},
                                   {LrScheduleKind::linear, "linear"},
                                   {LrScheduleKind::cosine, "cosine"},
                                   {LrScheduleKind::inverse_sqrt, "inverse_sqrt"}};

}  // namespace

LrScheduleKind parse_lr_schedule_kind(const std::string& name) {
  for (const KindName& k : kKindNames)
    if (name == k.name) return k.kind;
  std::string known;
  for (const KindName& k : kKindNames) known += std::string(known.empty() ? "" : ", ") + k.name;
  throw Error(str_cat("unknown lr schedule \"", name, "\" (expected one of: ", known, ")"));
}

const char* lr_schedule_kind_name(LrScheduleKind kind) {
  for (const KindName& k : kKindNames)
    if (k.kind == kind) return k.name;
  return "?";
}

void LrSchedule::validate() const {
  const char* name = lr_schedule_kind_name(kind);
  TARN_CHECK(std::isfinite(lr) && lr >= 0.0f, "lr schedule ", name, ": lr must be a finite number >= 0, got ", lr);
  TARN_CHECK(min_lr >= 0.0f && min_lr <= lr, "lr schedule ", name, ": min_lr must be in [0, lr = ", lr, "], got ",
             min_lr);
  TARN_CHECK(warmup_steps >= 0, "lr schedule ", name, ": warmup_steps must be >= 0, got ", warmup_steps);
  if (kind == LrScheduleKind::linear || kind == LrScheduleKind::cosine) {
    TARN_CHECK(total_steps >= 1, "lr schedule ", name, ": total_steps must be >= 1, got ", total_steps);
    TARN_CHECK(total_steps >= warmup_steps, "lr schedule ", name, ": total_steps (", total_steps,
               ") must be >= warmup_steps (", warmup_steps, ")");
  }
}

float LrSchedule::lr_at(int64_t step) const {
  TARN_CHECK(step >= 0, "lr schedule: step must be >= 0, got ", step);
  const double peak = lr, floor = min_lr;
  if (step < warmup_steps) return static_cast<float>(peak * static_cast<double>(step) / warmup_steps);

  // Fraction of the decay done, in [0, 1]; the max(1, .) guards mirror HF's.
  const auto progress = [&] {
    const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
    return std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  };
  switch (kind) {
    case LrScheduleKind::constant:
      return static_cast<float>(peak);
    case LrScheduleKind::linear:
      return static_cast<float>(floor + (peak - floor) * (1.0 - progress()));
    case LrScheduleKind::cosine:
      return static_cast<float>(floor + (peak - floor) * 0.5 * (1.0 + std::cos(kPi * progress())));
    case LrScheduleKind::inverse_sqrt: {
      // fairseq: decay_factor = lr * sqrt(warmup); lr = decay_factor / sqrt(num_updates). With no
      // warm-up the decay starts at once, from lr at step 1 (step 0 also gets lr).
      const double w = static_cast<double>(std::max<int64_t>(1, warmup_steps));
      const double s = static_cast<double>(std::max<int64_t>(1, step));
      return static_cast<float>(std::max(floor, peak * std::sqrt(w) / std::sqrt(s)));
    }
  }
  return static_cast<float>(peak);
}

}  // namespace tarn
