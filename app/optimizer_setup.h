#pragma once
// The optimizer a recipe asks for, in the types framework/train/ takes: the training step's
// options (AdamW, clipping, ZeRO-1, the gradient buckets and their overlap with the backward)
// and the learning-rate schedule.
#include "app/recipe/recipe.h"
#include "framework/optim/lr_schedule.h"
#include "framework/train/step.h"

namespace tarn::app {

// optimizer.{lr,betas,eps,weight_decay,clip_norm} and training.{shard_optimizer,
// overlap_communication,gradient_bucket_mb}; the step's lr is set at each step by the schedule.
TrainStepOptions train_step_options(const Recipe& recipe);

// optimizer.{schedule,lr,warmup_steps,min_lr}, decaying (linear, cosine) to training.max_steps.
// A ConfigError at optimizer.schedule for a decay to a max_steps of 0 (unlimited); the
// schedule's own checks (LrSchedule::validate) otherwise.
LrSchedule lr_schedule(const Recipe& recipe);

}  // namespace tarn::app
