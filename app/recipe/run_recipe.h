#pragma once
// The recipe's sections about the run rather than the model or the data: the optimizer and
// its schedule, the training loop and its device, validation, checkpoints, logging, and the
// attention transfer before training (linearize).
#include <array>
#include <cstdint>
#include <string>

#include "framework/config/schema.h"

namespace tarn {

struct OptimizerRecipe {
  std::string name = "adamw";
  double lr = 5e-4;
  std::array<double, 2> betas{0.9, 0.98};
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t warmup_steps = 500;
  std::string schedule = "inverse_sqrt";  // constant | linear | cosine | inverse_sqrt
  double min_lr = 0.0;
  double clip_norm = 1.0;  // 0 = no clipping
};

struct TrainingRecipe {
  int64_t tokens_per_batch = 4096;
  int64_t grad_accumulation = 1;
  int64_t max_steps = 10000;     // 0 = no limit
  int64_t max_epochs = 0;        // 0 = no limit
  double max_time_minutes = 0;   // 0 = no limit
  int64_t seed = 1;
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string precision = "f32";  // f32 | bf16 (framework/precision.h)
  int64_t threads = 0;         // 0 = every core
  double label_smoothing = 0.1;
  int64_t max_bad_steps = 5;  // non-finite losses in a row before stopping
  // Data-parallel runs (mpirun): a collective not done in this time ends the job.
  double collective_timeout_s = 300;
  int64_t check_replicas_every_steps = 200;  // parameter checksum across ranks; 0 = at start only
  bool shard_optimizer = false;              // ZeRO-1: AdamW moments split across the ranks
  bool overlap_communication = true;         // all-reduce gradient buckets during the backward
  double gradient_bucket_mb = 32;            // gradients per all-reduce call
};

struct ValidationRecipe {
  int64_t every_steps = 500;  // 0 = only at the end
  int64_t max_batches = 0;    // 0 = the whole validation set
  int64_t early_stopping_patience = 0;  // validations without improvement before stopping; 0 = off
};

struct CheckpointRecipe {
  std::string dir = "runs/{recipe}";
  int64_t every_steps = 1000;  // 0 = only at the end
  int64_t keep_last = 3;       // 0 = keep every checkpoint
  bool keep_best = true;       // also keep the one with the best validation loss
};

// Attention transfer before training (app/linearize.h): only the parameters the new attention
// kinds add are trained to match softmax attention's output, layer by layer.
struct LinearizeRecipe {
  int64_t steps = 0;  // 0 = no such stage
  double lr = 1e-3;
};

struct LoggingRecipe {
  int64_t every_steps = 50;
  std::string metrics_file;     // JSON lines; "" is resolved to <checkpoints.dir>/metrics.jsonl
  std::string tensorboard;      // event files' folder; "" is resolved to <checkpoints.dir>; "off": none
  std::string color = "auto";   // auto | always | never
};

struct Recipe;

namespace recipe_sections {

void declare_optimizer(config::SectionBuilder<OptimizerRecipe> optimizer);
void declare_training(config::SectionBuilder<TrainingRecipe> training);
void declare_validation(config::SectionBuilder<ValidationRecipe> validation);
void declare_checkpoints(config::SectionBuilder<CheckpointRecipe> checkpoints);
void declare_logging(config::SectionBuilder<LoggingRecipe> logging);
void declare_linearize(config::SectionBuilder<LinearizeRecipe> linearize);

// The schedule against the run's length, a stopping condition, and early stopping that has a
// validation set to watch.
void check_run(const Recipe& r, config::Loader& loader);
// A warning for a validation section that never runs.
void warn_unused_validation(const Recipe& r, config::Loader& loader);

}  // namespace recipe_sections
}  // namespace tarn
