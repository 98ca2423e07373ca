#include "app/optimizer_setup.h"

#include <algorithm>

#include "framework/config/config_error.h"

namespace tarn::app {

TrainStepOptions train_step_options(const Recipe& recipe) {
  const OptimizerRecipe& o = recipe.optimizer;
  TrainStepOptions so;
  so.adamw.lr = static_cast<float>(o.lr);
  so.adamw.beta1 = static_cast<float>(o.betas[0]);
  so.adamw.beta2 = static_cast<float>(o.betas[1]);
  so.adamw.eps = static_cast<float>(o.eps);
  so.adamw.weight_decay = static_cast<float>(o.weight_decay);
  so.clip_norm = static_cast<float>(o.clip_norm);
  so.shard_optimizer = recipe.training.shard_optimizer;
  so.overlap_communication = recipe.training.overlap_communication;
  // TrainStep raises it to the 4 bytes GradientSync needs at least.
  so.bucket_bytes = static_cast<int64_t>(std::min(recipe.training.gradient_bucket_mb * (1 << 20), 1e15));
  return so;
}

LrSchedule lr_schedule(const Recipe& recipe) {
  const OptimizerRecipe& o = recipe.optimizer;
  LrSchedule s;
  s.kind = parse_lr_schedule_kind(o.schedule);
  s.lr = static_cast<float>(o.lr);
  s.warmup_steps = o.warmup_steps;
  s.total_steps = recipe.training.max_steps > 0 ? recipe.training.max_steps : 0;
  s.min_lr = static_cast<float>(o.min_lr);
  if ((s.kind == LrScheduleKind::linear || s.kind == LrScheduleKind::cosine) && s.total_steps == 0)
    throw ConfigError(recipe.where("optimizer.schedule"), "optimizer.schedule",
                      o.schedule +
                          " decays to training.max_steps, which is 0 (unlimited); use inverse_sqrt or constant, or "
                          "set training.max_steps");
  s.validate();
  return s;
}

}  // namespace tarn::app
