#include "app/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batcher.h"
#include "framework/allocator.h"
#include "framework/distributed/parameter_sync.h"
#include "framework/io/checkpoint_dir.h"
#include "framework/log/log.h"
#include "framework/log/signals.h"
#include "framework/ops/nn.h"
#include "framework/train/run_control.h"
#include "framework/train/step.h"
#include "kernels/gemm.h"
#include "layers/bart.h"
#include "app/model_io.h"
#include "app/optimizer_setup.h"
#include "app/progress.h"
#include "app/ranks.h"
#include "app/run_state.h"
#include "app/session.h"
#include "app/train_metrics.h"

namespace tarn::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Datasets {
  std::unique_ptr<Dataset> train, valid, test;  // valid and test only when the recipe names them
};

// A step taken with its result deferred (TrainStep::defers), until settle() learns what it was.
struct PendingStep {
  int64_t step = 0;     // progress.step it took
  int64_t counted = 0;  // target labels over every rank
};

class Trainer {
 public:
  // Reads the recipe, builds tokenizer, data, model and optimizer on this rank, and resumes or
  // restarts the run (app/run_state.h).
  explicit Trainer(const TrainOptions& opt);
  TrainSummary run();

 private:
  // Setup, in order.
  void place();  // the recipe's checks, this rank's device and threads, its communicators
  void open_data();
  void build_model();
  void build_step();  // TrainStep and the learning-rate schedule
  void open_batches();
  // The run.
  bool step();  // false when the step was skipped (non-finite or diverged); a deferred one is taken
  std::optional<MicroBatchLoss> loss(const Batch& b);
  void advance(float lr);
  // Counts a step's agreed result: the bookkeeping of an applied step, or of a skipped one.
  void account(const StepResult& r, int64_t counted);
  // Reads back the results of the steps TrainStep deferred and accounts for them (before the
  // progress line, validation, a checkpoint and the end of the run).
  void settle();
  void periodic(const Cadence& cadence);  // what is due after a step
  void log_progress();
  void validate_and_maybe_save_best();
  void save(const char* why) { run_state_.save(parts(), ranks_, why); }
  StopReason stop_reason();
  StopReason finish(StopReason reason, const Cadence& cadence);
  void summarise(StopReason reason, int64_t start_step);
  void test(StopReason reason);
  RunParts parts() { return {recipe_, *tok_, *model_, *step_, *batcher_, progress_}; }

  Recipe recipe_;
  Ranks ranks_;  // the control and gradient communicators (app/ranks.h)
  Device device_;
  std::optional<Tokenizer> tok_;
  Datasets data_;
  std::unique_ptr<BartForConditionalGeneration> model_;
  std::unique_ptr<TrainStep> step_;  // the optimizer step (framework/train/step.h)
  LrSchedule schedule_;
  std::unique_ptr<Batcher> batcher_;
  Progress progress_;
  RunState run_state_;   // checkpoints, the lock and the clock (app/run_state.h)
  TrainMetrics metrics_;  // progress lines, metrics file, TensorBoard (app/train_metrics.h)
  TrainSummary summary_;
  std::vector<PendingStep> pending_;  // oldest first
};

Trainer::Trainer(const TrainOptions& opt)
    : recipe_(load_recipe(opt.recipe_path, opt.overrides)),
      ranks_(opt.communicator, recipe_.training.collective_timeout_s) {
  place();
  open_data();
  build_model();
  build_step();
  open_batches();
  run_state_.start(parts(), ranks_, opt.restart);
  if (ranks_.lead()) metrics_.open(recipe_, progress_.step);
}

void Trainer::place() {
  if (ranks_.lead())  // every rank reads the same recipe: said once
    for (const std::string& w : recipe_.warnings) log::warn("config", w);
  ranks_.place(recipe_);
  device_ = training_device(recipe_);  // before any data work: a missing GPU is reported at once
  check_recipe_files(recipe_);
  check_memory(recipe_);  // an absurd model is refused before any allocation
  log::set_color(recipe_.logging.color);
  configure_threads(recipe_);
  ranks_.open_gradients(recipe_, device_);
  ranks_.log(recipe_, device_);
}

void Trainer::open_data() {
  // Rank 0 trains the tokenizer when it is missing; the others then load its file.
  if (ranks_.lead()) tok_ = open_tokenizer(recipe_);
  if (!ranks_.solo()) ranks_.control().barrier();
  if (!ranks_.lead()) tok_ = open_tokenizer(recipe_);
  const uint64_t seed = static_cast<uint64_t>(recipe_.training.seed);
  data_.train = open_dataset(recipe_, *tok_, recipe_.data.train, seed, "train");
  if (!recipe_.data.valid.empty()) data_.valid = open_dataset(recipe_, *tok_, recipe_.data.valid, kEvalNoiseSeed, "valid");
  if (!recipe_.data.test.empty()) data_.test = open_dataset(recipe_, *tok_, recipe_.data.test, kEvalNoiseSeed, "test");
}

void Trainer::build_model() {
  const BartConfig cfg = model_config(recipe_, tok_->vocab_size());
  model_ = std::make_unique<BartForConditionalGeneration>(cfg, static_cast<uint64_t>(recipe_.training.seed));
  model_->to(device_);  // initialised on the host (Philox), then copied: the same weights on every device
  model_->train();
  model_->set_precision(training_precision(recipe_, device_));
  log::info("model", cfg.str(), "; ", log::thousands(model_->parameter_count()), " parameters on ", device_.str());
}

void Trainer::build_step() {
  step_ = std::make_unique<TrainStep>(*model_, ranks_.control(), ranks_.gradients(), train_step_options(recipe_));
  const double mb = 1.0 / (1 << 20);
  if (const ShardedAdamW* sharded = step_->sharded())
    log::info("optim", "ZeRO-1: AdamW moments sharded over ", ranks_.world(), " ranks, ",
              log::number("%.1f", 2.0 * 4 * sharded->shard_elements() * mb), " MB per rank (",
              log::number("%.1f", 2.0 * 4 * sharded->elements() * mb), " MB unsharded)");
  else if (recipe_.training.shard_optimizer)
    log::info("optim", "training.shard_optimizer has no effect on one rank");
  schedule_ = lr_schedule(recipe_);
}

void Trainer::open_batches() {
  BatcherConfig bc;
  bc.plan.max_tokens = recipe_.training.tokens_per_batch;
  bc.seed = static_cast<uint64_t>(recipe_.training.seed);
  bc.rank = ranks_.rank();
  bc.world_size = ranks_.world();
  bc.split_rows = true;  // each rank its share of every global batch
  batcher_ = std::make_unique<Batcher>(*data_.train, bc);
}

// One optimizer step (framework/train/step.h) over this rank's share of the next
// grad_accumulation global batches, then the run's bookkeeping.
bool Trainer::step() {
  std::vector<Batch> batches;
  int64_t counted = 0;  // the labels the loss counts, over every rank's share
  for (int64_t i = 0; i < recipe_.training.grad_accumulation; ++i) {
    batches.push_back(batcher_->next());
    counted += batches.back().global_tgt_tokens;
  }
  const float lr = schedule_.lr_at(progress_.step);
  const StepResult r = step_->run(static_cast<int64_t>(batches.size()), counted,
                                  [&](int64_t k) { return loss(batches[static_cast<size_t>(k)]); }, lr);
  progress_.data = batcher_->position();
  progress_.dropout = model_->dropout_state();
  if (r.pending()) {
    // Deferred (on a GPU, one rank or several): the step counts as taken, and settle() says
    // later whether it applied. A skipped one keeps its number (the schedule moved on); the
    // device left the parameters, moments and update counts as they were, on every rank.
    pending_.push_back({progress_.step + 1, counted});
  } else {
    account(r, counted);
    if (!r.applied()) return false;
  }
  advance(lr);
  return true;
}

// One micro-batch's loss on this rank; nothing when its share of a small global batch was empty.
std::optional<MicroBatchLoss> Trainer::loss(const Batch& b) {
  if (b.rows == 0) return std::nullopt;
  MicroBatchLoss m;
  const StagedInputs staged(b, kPadId, device_);  // ids, targets and padding up in one copy, no wait
  const Tensor logits = forward_batch(*model_, b, staged.src_padding);
  // The NLL stays in the loss's totals (TrainStep reads or sums it where it is).
  m.loss = seq2seq_loss(logits, staged.targets, kPadId, static_cast<float>(recipe_.training.label_smoothing),
                        &m.counted, nullptr, CrossEntropyOptions{}.ignore_index, &m.totals);
  m.tokens = b.src_tokens() + b.tgt_tokens();
  return m;
}

// A step taken at `lr`: counted, and FAVOR+ projections whose time has come redrawn.
void Trainer::advance(float lr) {
  metrics_.took_step(lr);
  model_->favor_step();
  ++progress_.step;
}

void Trainer::account(const StepResult& r, int64_t counted) {
  if (!r.applied()) {
    ++progress_.bad_steps_in_row;
    ++progress_.skipped_steps;
    // The number the step has (deferred) or would have had (skipped at once).
    const int64_t number = pending_.empty() ? progress_.step + 1 : pending_.front().step;
    if (ranks_.lead())  // agreed by every rank: said once
      metrics_.log_skipped(number, r.outcome, progress_.bad_steps_in_row, recipe_.training.max_bad_steps);
    return;
  }
  progress_.bad_steps_in_row = 0;
  progress_.tokens_seen += r.tokens;
  metrics_.add(r, counted);
}

void Trainer::settle() {
  if (pending_.empty()) return;
  const std::vector<StepResult> results = step_->settle();
  TARN_ASSERT(results.size() == pending_.size(), "Trainer: ", pending_.size(), " steps pending, ", results.size(),
              " results");
  for (const StepResult& r : results) {
    account(r, pending_.front().counted);
    pending_.erase(pending_.begin());
  }
}

void Trainer::periodic(const Cadence& cadence) {
  const int64_t s = progress_.step;
  // Deferred results are read here and nowhere else in the loop: every periodic action reads
  // the device anyway, and a run of bad steps is seen at worst one interval late.
  if (cadence.logs_at(s) || cadence.checks_replicas_at(s) || cadence.validates_at(s) || cadence.checkpoints_at(s))
    settle();
  // Too many bad steps among those just read: nothing more is logged, validated or saved.
  if (progress_.bad_steps_in_row >= recipe_.training.max_bad_steps) return;
  if (cadence.logs_at(s)) log_progress();
  if (cadence.checks_replicas_at(s))
    check_replicas_identical(model_->parameters(), ranks_.control(), "after step " + std::to_string(s));
  if (cadence.validates_at(s)) validate_and_maybe_save_best();
  if (cadence.checkpoints_at(s)) save("every_steps");
}

void Trainer::log_progress() {
  if (const std::optional<double> loss = metrics_.log_interval(progress_, recipe_.training, run_state_.elapsed_s()))
    summary_.train_loss = *loss;
}

void Trainer::validate_and_maybe_save_best() {
  if (!data_.valid) return;
  const DropoutState dropout = model_->dropout_state();  // evaluation must not move the streams
  const auto start = Clock::now();
  ValidationReport v;
  v.result = evaluate(*model_, *data_.valid, recipe_.training.tokens_per_batch, recipe_.validation.max_batches,
                      &ranks_.control());
  model_->set_dropout_state(dropout);
  summary_.valid = v.result;
  // A non-finite validation loss (a diverged model) is never the best.
  const double nll = v.result.mean_nll();
  v.best = std::isfinite(nll) && (!progress_.has_best || nll < progress_.best_val_nll);
  if (v.best) {
    progress_.has_best = true;
    progress_.best_val_nll = nll;
    progress_.best_step = progress_.step;
    progress_.evals_without_improvement = 0;
  } else {
    ++progress_.evals_without_improvement;
  }
  // Memory so far: the allocator's live high water on the training device (what the model
  // and its steps needed) beside the process's resident peak (what the machine paid).
  v.memory = memory_stats(device_);
  v.resident = resident_memory();
  summary_.live_peak_bytes = v.memory.high_water_bytes;
  summary_.rss_peak_bytes = v.resident.peak_bytes;
  const double elapsed = run_state_.elapsed_s();
  v.seconds = seconds_since(start);
  metrics_.log_validation(progress_, v, elapsed, device_);
  if (v.best && recipe_.checkpoints.keep_best) {
    save("best validation");
    if (ranks_.lead()) set_best_checkpoint(recipe_.checkpoints.dir, progress_.step);
  }
}

// The same answer on every rank (framework/train/run_control.h).
StopReason Trainer::stop_reason() {
  const TrainingRecipe& t = recipe_.training;
  StopLimits limits;
  limits.max_steps = t.max_steps;
  limits.max_epochs = t.max_epochs;
  limits.max_time_s = t.max_time_minutes > 0 ? t.max_time_minutes * 60 : 0;
  limits.max_bad_steps = t.max_bad_steps;
  limits.patience = recipe_.validation.early_stopping_patience;
  RunPosition at;
  at.step = progress_.step;
  at.epoch = static_cast<int64_t>(progress_.data.epoch);
  at.elapsed_s = run_state_.elapsed_s();
  at.bad_steps_in_row = progress_.bad_steps_in_row;
  at.evals_without_improvement = progress_.evals_without_improvement;
  return agreed_stop_reason(limits, at, ranks_.control());
}

TrainSummary Trainer::run() {
  install_stop_handlers();
  run_state_.start_clock();
  metrics_.start();
  const int64_t start_step = progress_.step;
  metrics_.log_start(progress_.step, static_cast<long long>(data_.train->size()), recipe_);
  Cadence cadence;
  cadence.log_every = recipe_.logging.every_steps;
  cadence.check_replicas_every = ranks_.solo() ? 0 : recipe_.training.check_replicas_every_steps;
  cadence.validate_every = recipe_.validation.every_steps;
  cadence.checkpoint_every = recipe_.checkpoints.every_steps;
  StopReason reason = stop_reason();
  while (reason == StopReason::none) {
    if (step()) periodic(cadence);
    reason = stop_reason();
  }
  reason = finish(reason, cadence);
  summarise(reason, start_step);
  test(reason);
  if (!ranks_.solo()) {
    ranks_.control().barrier();  // every rank returns once rank 0's last checkpoint is written
    ranks_.log_gradient_exchange(*step_, recipe_.training.overlap_communication, summary_.steps_this_run,
                                 summary_.wall_s);
  }
  if (model_->precision() == Precision::bf16 && device_.is_cpu())  // primitives are kept by shape: few after warm-up
    log::info("train", "bf16: ", kernels::cpu::bf16_gemm_primitives_created(), " oneDNN matmul primitives made");
  log::info("train", "stopped (", stop_reason_name(reason), ") at step ", log::thousands(progress_.step), " after ",
            log::duration(summary_.wall_s), "; ", log::thousands(static_cast<long long>(summary_.tokens_per_s)),
            " tok/s over this run; last checkpoint ", summary_.checkpoint);
  return summary_;
}

// The end of the loop: the last results read and logged, then a last validation and checkpoint,
// or the failure said. Returns the final stop reason.
StopReason Trainer::finish(StopReason reason, const Cadence& cadence) {
  settle();
  // A stop for another reason (max_steps, a signal) may find the last steps bad only now.
  if (progress_.bad_steps_in_row >= recipe_.training.max_bad_steps && !stopped_by_signal(reason))
    reason = StopReason::bad_steps;
  log_progress();
  log::end_progress();
  summary_.failed = reason == StopReason::bad_steps;
  if (summary_.failed) {
    const int64_t saved = run_state_.last_saved_step();
    log::line("train", str_cat("stopped: ", progress_.bad_steps_in_row,
                               " steps in a row had a non-finite or diverged loss or gradient; ",
                               saved >= 0 ? "the last good checkpoint (" + checkpoint_dir(recipe_.checkpoints.dir, saved) +
                                                ") is intact"
                                          : std::string("no checkpoint had been written yet"),
                               ". Lower optimizer.lr or check the data."));
  } else {
    if (cadence.validates_at_end(reason, progress_.step)) validate_and_maybe_save_best();
    save(stop_reason_name(reason));
  }
  return reason;
}

void Trainer::summarise(StopReason reason, int64_t start_step) {
  summary_.steps = progress_.step;
  summary_.steps_this_run = progress_.step - start_step;
  summary_.stop_reason = stop_reason_name(reason);
  summary_.checkpoint = run_state_.last_checkpoint();
  summary_.wall_s = run_state_.this_run_s();
  summary_.tokens_per_s = metrics_.tokens_this_run() / std::max(summary_.wall_s, 1e-9);
  summary_.comm_s = step_->comm_seconds();
  summary_.buckets_started_early = step_->buckets_started_early();
}

// The test set once at the end of a run that neither failed nor was interrupted.
void Trainer::test(StopReason reason) {
  if (!data_.test || summary_.failed || stopped_by_signal(reason)) return;
  summary_.test = evaluate(*model_, *data_.test, recipe_.training.tokens_per_batch, 0, &ranks_.control());
  metrics_.log_test(progress_.step, *summary_.test, recipe_.data.test);
}

}  // namespace

TrainSummary train(const TrainOptions& options) { return Trainer(options).run(); }

}  // namespace tarn::app
