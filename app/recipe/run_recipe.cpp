#include "app/recipe/run_recipe.h"

#include <limits>
#include <string>

#include "app/recipe/first_given.h"
#include "app/recipe/recipe.h"

namespace tarn::recipe_sections {
namespace {

using config::Loader;
using config::SectionBuilder;

bool is_device(const std::string& s) {
  if (s == "cpu" || s == "cuda") return true;
  if (s.rfind("cuda:", 0) != 0 || s.size() == 5 || s.size() > 8) return false;
  return s.find_first_not_of("0123456789", 5) == std::string::npos;
}

void declare_data_parallel(SectionBuilder<TrainingRecipe> training) {
  training.number(&TrainingRecipe::collective_timeout_s, "collective_timeout_s",
                  "data-parallel runs: seconds a collective may wait for the other ranks before the job is ended")
      .positive();
  training.integer(&TrainingRecipe::check_replicas_every_steps, "check_replicas_every_steps",
                   "data-parallel runs: compare a parameter checksum across ranks every this many steps; 0 = at "
                   "start only")
      .non_negative();
  training.boolean(&TrainingRecipe::shard_optimizer, "shard_optimizer",
                   "data-parallel runs: ZeRO-1, each rank keeps and updates 1/ranks of the AdamW moments "
                   "(gradients reduce-scattered, parameters all-gathered)");
  training.boolean(&TrainingRecipe::overlap_communication, "overlap_communication",
                   "data-parallel runs: start each bucket's gradient all-reduce during the backward, as soon as "
                   "its gradients are final (same results; off: all at once after it; no effect with "
                   "shard_optimizer)");
  training.number(&TrainingRecipe::gradient_bucket_mb, "gradient_bucket_mb",
                  "data-parallel runs: MiB of gradients per all-reduce call (smaller buckets start sooner during "
                  "the backward; larger ones make fewer calls)")
      .positive();
}

void check_schedule(const OptimizerRecipe& o, const TrainingRecipe& t, Loader& loader) {
  if (o.min_lr > o.lr) {
    loader.error("optimizer.min_lr", str_cat("expected at most optimizer.lr = ", o.lr, ", got ", o.min_lr));
  }
  if ((o.schedule == "linear" || o.schedule == "cosine") && t.max_steps == 0) {
    loader.error("optimizer.schedule", "expected constant or inverse_sqrt when training.max_steps is 0 (" +
                                           o.schedule + " decays until training.max_steps), got " + o.schedule);
  }
  if (t.max_steps > 0 && o.warmup_steps > t.max_steps) {
    // A decaying schedule needs its warm-up to end before max_steps; the others merely stop
    // during warm-up, which a first stage that a resumed run continues may well want.
    if (o.schedule == "linear" || o.schedule == "cosine")
      loader.error("optimizer.warmup_steps",
                   str_cat("expected at most training.max_steps = ", t.max_steps, " with a ", o.schedule,
                           " schedule, got ", o.warmup_steps));
    else
      loader.warn("optimizer.warmup_steps", str_cat(o.warmup_steps, " is longer than training.max_steps = ",
                                                    t.max_steps, ": the run ends during warm-up"));
  }
}

void check_stopping(const Recipe& r, Loader& loader) {
  const TrainingRecipe& t = r.training;
  if (t.max_steps == 0 && t.max_epochs == 0 && t.max_time_minutes == 0) {
    loader.error_at(first_given(loader, {"training.max_steps", "training.max_epochs", "training.max_time_minutes",
                                         "training"}),
                    "training", "expected a stopping condition: max_steps, max_epochs or max_time_minutes > 0");
  }
  if (r.data.valid.empty() && r.validation.early_stopping_patience > 0) {
    loader.error("validation.early_stopping_patience",
                 str_cat("expected 0 when data.valid is empty (early stopping needs validation), got ",
                         r.validation.early_stopping_patience));
  }
}

}  // namespace

void declare_optimizer(SectionBuilder<OptimizerRecipe> optimizer) {
  optimizer.choice(&OptimizerRecipe::name, "name", "the optimizer (AdamW, decoupled weight decay)", {"adamw"});
  optimizer.number(&OptimizerRecipe::lr, "lr", "peak learning rate, reached at the end of warm-up").positive();
  optimizer.numbers(&OptimizerRecipe::betas, "betas", "Adam's moment decay rates [beta1, beta2]").fraction();
  optimizer.number(&OptimizerRecipe::eps, "eps", "Adam's denominator epsilon").positive();
  optimizer.number(&OptimizerRecipe::weight_decay, "weight_decay", "decoupled weight decay (not biases or norms)")
      .non_negative();
  optimizer.integer(&OptimizerRecipe::warmup_steps, "warmup_steps", "linear warm-up from 0 to lr").non_negative();
  optimizer.choice(&OptimizerRecipe::schedule, "schedule",
                   "decay after warm-up (linear and cosine end at min_lr at training.max_steps)",
                   {"constant", "linear", "cosine", "inverse_sqrt"});
  optimizer.number(&OptimizerRecipe::min_lr, "min_lr", "the floor of the decay").non_negative();
  optimizer.number(&OptimizerRecipe::clip_norm, "clip_norm", "clip the global gradient norm to this; 0 = off")
      .non_negative();
}

void declare_training(SectionBuilder<TrainingRecipe> training) {
  training.integer(&TrainingRecipe::tokens_per_batch, "tokens_per_batch",
                   "padded tokens per batch: rows * longest side <= this")
      .min(1);
  training.integer(&TrainingRecipe::grad_accumulation, "grad_accumulation", "batches per optimizer step").min(1);
  training.integer(&TrainingRecipe::max_steps, "max_steps", "stop after this many optimizer steps; 0 = no limit")
      .non_negative();
  training.integer(&TrainingRecipe::max_epochs, "max_epochs", "stop after this many epochs; 0 = no limit")
      .non_negative();
  training.number(&TrainingRecipe::max_time_minutes, "max_time_minutes",
                  "stop after this much wall-clock time; 0 = no limit")
      .non_negative();
  training.integer(&TrainingRecipe::seed, "seed", "seed of every random stream (Philox)").non_negative();
  training.string(&TrainingRecipe::device, "device", "where to train: cpu, cuda or cuda:N")
      .check(is_device, "cpu, cuda or cuda:N");
  training.choice(&TrainingRecipe::precision, "precision",
                  "matrix products: f32, or bf16 mixed precision (bf16 operands on bf16 hardware with f32 "
                  "accumulation; weights, optimizer state, norms, softmax and the loss in f32; checkpoints f32). "
                  "Where the device has no bf16 hardware, tarn warns and trains in f32",
                  {"f32", "bf16"});
  training.integer(&TrainingRecipe::threads, "threads", "CPU threads; 0 = every core (more than the cores only slows a run)")
      .non_negative()
      .max(1024);
  training.number(&TrainingRecipe::label_smoothing, "label_smoothing", "label smoothing of the cross-entropy")
      .fraction();
  training.integer(&TrainingRecipe::max_bad_steps, "max_bad_steps",
                   "non-finite losses in a row before stopping (each such step is skipped)")
      .min(1);
  declare_data_parallel(training);
}

void declare_validation(SectionBuilder<ValidationRecipe> validation) {
  validation.integer(&ValidationRecipe::every_steps, "every_steps", "validate every this many steps; 0 = at the end")
      .non_negative();
  validation.integer(&ValidationRecipe::max_batches, "max_batches", "batches per validation; 0 = the whole set")
      .non_negative();
  validation.integer(&ValidationRecipe::early_stopping_patience, "early_stopping_patience",
                     "stop after this many validations without improvement; 0 = off")
      .non_negative();
}

void declare_checkpoints(SectionBuilder<CheckpointRecipe> checkpoints) {
  checkpoints.string(&CheckpointRecipe::dir, "dir", "run folder; {recipe} = the recipe file's name")
      .check([](const std::string& s) { return !s.empty(); }, "a non-empty path");
  checkpoints.integer(&CheckpointRecipe::every_steps, "every_steps", "save every this many steps; 0 = at the end")
      .non_negative();
  checkpoints.integer(&CheckpointRecipe::keep_last, "keep_last", "periodic checkpoints kept; 0 = all")
      .non_negative()
      .max(std::numeric_limits<int>::max());  // prune_checkpoints (framework/io/checkpoint_dir.h) takes an int
  checkpoints.boolean(&CheckpointRecipe::keep_best, "keep_best", "also keep the best validation checkpoint");
}

void declare_logging(SectionBuilder<LoggingRecipe> logging) {
  logging.integer(&LoggingRecipe::every_steps, "every_steps", "a progress line every this many steps").min(1);
  logging.string(&LoggingRecipe::metrics_file, "metrics_file",
                 "JSON lines of every logged metric; \"\" = <checkpoints.dir>/metrics.jsonl");
  logging.string(&LoggingRecipe::tensorboard, "tensorboard",
                 "folder of TensorBoard event files (scalars as the run goes); \"\" = <checkpoints.dir>, off = none");
  logging.choice(&LoggingRecipe::color, "color", "colored terminal output", {"auto", "always", "never"});
}

void declare_linearize(SectionBuilder<LinearizeRecipe> linearize) {
  linearize.integer(&LinearizeRecipe::steps, "steps", "transfer steps (batches of training.tokens_per_batch); 0 = none")
      .non_negative();
  linearize.number(&LinearizeRecipe::lr, "lr", "AdamW learning rate of the transfer (constant, no weight decay)")
      .positive();
}

void check_run(const Recipe& r, Loader& loader) {
  check_schedule(r.optimizer, r.training, loader);
  check_stopping(r, loader);
}

void warn_unused_validation(const Recipe& r, Loader& loader) {
  if (r.data.valid.empty() && loader.given("validation")) {
    loader.warn("validation", "ignored: data.valid is empty, so validation never runs");
  }
}

}  // namespace tarn::recipe_sections
