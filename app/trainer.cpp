#include "app/trainer.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "data/batcher.h"
#include "data/seed.h"
#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/distributed/parameter_sync.h"
#include "framework/config/config_error.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/run_lock.h"
#include "framework/log/log.h"
#include "framework/log/signals.h"
#include "framework/log/tensorboard.h"
#include "framework/ops/nn.h"
#include "framework/optim/lr_schedule.h"
#include "framework/train/run_control.h"
#include "framework/train/step.h"
#include "kernels/backend.h"
#include "kernels/gemm.h"
#include "kernels/mpi/mpi.h"
#include "kernels/parallel.h"
#include "layers/bart.h"
#include "app/checkpoint_state.h"
#include "app/init_from.h"
#include "app/linearize.h"
#include "app/model_io.h"
#include "app/resume_check.h"
#include "app/session.h"

namespace tarn::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Metrics are JSON numbers when finite; an infinite perplexity (or any other overflow) is null.
json::Value metric(double v) { return std::isfinite(v) ? json::Value::number(v) : json::Value(); }

// JSON lines for tools: one object per logging step and per validation, appended.
class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path) : out_(path, std::ios::app) {}
  bool good() const { return out_.good(); }
  void write(const json::Value& v) {
    out_ << v.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

struct Interval {  // what the progress line averages over
  double loss_sum = 0, nll_sum = 0;
  int64_t nll_tokens = 0, steps = 0, tokens = 0;
  double grad_norm_sum = 0;
  Clock::time_point start = Clock::now();
  void reset() { *this = Interval(); }
};

// --restart: the previous run's checkpoints move into run_dir/previous_<time>/ (nothing is
// deleted), so that a later resume cannot pick up a checkpoint of the old run. Its TensorBoard
// event files go with them (`tensorboard_dir`, "" for none): the new run starts at step 0, and
// TensorBoard shows the old one as the run previous_<time> when the event files live in run_dir.
void set_aside_previous_run(const std::string& run_dir, const std::string& tensorboard_dir) {
  namespace fs = std::filesystem;
  const auto old = list_checkpoints(run_dir);
  const bool has_best = fs::exists(fs::symlink_status(run_dir + "/best"));
  const std::vector<std::string> events = tensorboard_dir.empty() ? std::vector<std::string>{}
                                                                  : list_event_files(tensorboard_dir);
  if (old.empty() && !has_best && events.empty()) return;
  // Unique even for two restarts within one second: previous_<time>, then previous_<time>_2, ...
  const std::string stem = run_dir + "/previous_" + std::to_string(static_cast<long long>(std::time(nullptr)));
  std::string aside = stem;
  for (int k = 2; fs::exists(fs::symlink_status(aside)); ++k) aside = stem + "_" + std::to_string(k);
  fs::create_directories(aside);
  for (const CheckpointEntry& c : old) fs::rename(c.dir, aside + "/" + fs::path(c.dir).filename().string());
  if (has_best) fs::rename(run_dir + "/best", aside + "/best");
  for (const std::string& e : events) fs::rename(e, aside + "/" + fs::path(e).filename().string());
  log::info("ckpt", "--restart: moved ", old.size(), " checkpoints", events.empty() ? "" : " and the TensorBoard event files",
            " of the previous run to ", aside);
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& opt) : opt_(opt) {}
  TrainSummary run();

 private:
  void setup();
  bool step();  // false when the step was skipped (non-finite or diverged); a deferred one is taken
  // Counts a step's agreed result: the bookkeeping of an applied step, or of a skipped one.
  void account(const StepResult& r, int64_t counted);
  // Reads back the results of the steps TrainStep deferred and accounts for them (before the
  // progress line, validation, a checkpoint and the end of the run).
  void settle();
  void log_progress();
  void validate_and_maybe_save_best();
  void save(const char* why);
  StopReason stop_reason();
  // Data-parallel plumbing (one rank: no communication at all).
  void open_communicator();
  void open_gradient_communicator();
  void log_ranks();
  std::string overlap_note(int64_t steps) const;
  void resume_or_restart();
  void load_from(const Checkpoint& c);
  void restore_rank_dropout();
  void gather_rank_dropout();
  bool lead() const { return comm_->rank() == 0; }
  bool solo() const { return comm_->world() == 1; }

  TrainOptions opt_;
  std::unique_ptr<kernels::Communicator> owned_comm_, owned_grad_comm_;
  kernels::Communicator* comm_ = nullptr;       // control values, files, validation
  kernels::Communicator* grad_comm_ = nullptr;  // gradients: NCCL on GPUs, else comm_
  std::unique_ptr<RunLock> lock_;  // rank 0's hold on checkpoints.dir
  std::string launcher_;
  Recipe recipe_;
  Device device_;
  std::optional<Tokenizer> tok_;
  std::unique_ptr<Dataset> train_set_, valid_set_, test_set_;
  std::unique_ptr<BartForConditionalGeneration> model_;
  std::unique_ptr<TrainStep> step_;            // the optimizer step (framework/train/step.h)
  float lr_ = 0;                               // of the last update
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<MetricsFile> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0's, unless logging.tensorboard is off
  std::string tensorboard_dir() const { return recipe_.logging.tensorboard == "off" ? "" : recipe_.logging.tensorboard; }
  void tensorboard_scalars(const std::vector<std::pair<std::string, double>>& values);
  LrSchedule schedule_;
  Progress progress_;
  Interval interval_;
  TrainSummary summary_;
  int64_t last_saved_step_ = -1;
  double elapsed_at_start_ = 0;
  Clock::time_point run_start_ = Clock::now();
  // Training time over every run of this checkpoint folder: what progress.json keeps and the
  // time budget counts.
  double elapsed_s() const { return elapsed_at_start_ + seconds_since(run_start_); }
  double last_grad_norm_ = 0;
  int64_t tokens_this_run_ = 0;
  // Steps taken with deferred results (TrainStep::defers), oldest first, until settle() learns
  // what they were.
  struct PendingStep {
    int64_t step = 0;     // progress_.step it took
    int64_t counted = 0;  // target labels over every rank
  };
  std::vector<PendingStep> pending_;
};

// How much of the gradient all-reduce started during the backward (training.overlap_communication).
std::string Trainer::overlap_note(int64_t steps) const {
  if (step_->sharded()) return "";
  if (!recipe_.training.overlap_communication) return " (training.overlap_communication off)";
  return str_cat(" in ", step_->buckets(), " buckets, ",
                 log::number("%.1f", static_cast<double>(step_->buckets_started_early()) / static_cast<double>(steps)),
                 " of them started during the backward per step");
}

void Trainer::open_communicator() {
  if (opt_.communicator) {
    comm_ = opt_.communicator;
    return;
  }
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  if (launch.launched) {
    // Quiet before MPI starts: only rank 0 speaks from the first line on.
    log::set_rank(launch.rank, launch.world);
    owned_comm_ = kernels::mpi::world_communicator(recipe_.training.collective_timeout_s);
    launcher_ = launch.launcher;
  } else {
    owned_comm_ = kernels::solo_communicator();
  }
  comm_ = owned_comm_.get();
}

// Gradients of CUDA parameters go through NCCL (its unique id sent over the control
// communicator); host memory (the CPU, and the emulated CUDA device of the tests) through the
// control communicator itself.
void Trainer::open_gradient_communicator() {
  grad_comm_ = comm_;
  if (solo() || device_.is_cpu() || std::string(kernels::cuda_backend().name) != "cuda") return;
#if defined(TARN_WITH_CUDA)
  if (!kernels::cuda::nccl_available())
    throw ConfigError(recipe_.where("training.device"), "training.device",
                      "data-parallel training on CUDA devices needs NCCL, and this tarn was built without it "
                      "(cmake/TarnCuda.cmake: set NCCL_ROOT and reconfigure)");
  kernels::NcclUniqueId id{};
  if (lead()) id = kernels::cuda::nccl_unique_id();
  comm_->broadcast_host_bytes(id.data(), static_cast<int64_t>(id.size()), 0);
  owned_grad_comm_ = kernels::cuda::nccl_communicator(id, comm_->rank(), comm_->world(), device_.index);
  grad_comm_ = owned_grad_comm_.get();
#endif
}

// The first lines of a data-parallel run: who runs where, and what a batch is.
void Trainer::log_ranks() {
  if (solo()) return;
  const int world = comm_->world();
  // Per rank: threads, device kind and index, gradient backend (0 mpi/threads, 1 nccl).
  std::vector<double> info(3 * static_cast<size_t>(world), 0.0);
  const size_t me = 3 * static_cast<size_t>(comm_->rank());
  info[me] = kernels::num_threads();
  info[me + 1] = device_.is_cpu() ? -1.0 : device_.index;
  info[me + 2] = std::string(grad_comm_->backend()) == "nccl" ? 1.0 : 0.0;
  comm_->all_reduce_host(info.data(), static_cast<int64_t>(info.size()), kernels::ReduceOp::sum);
  log::info("dist", world, " ranks (", comm_->backend(), launcher_.empty() ? "" : ", launched by " + launcher_,
            "); only rank 0 logs and writes checkpoints");
  for (int r = 0; r < world; ++r) {
    const double* i = &info[3 * static_cast<size_t>(r)];
    log::info("dist", "rank ", r, ": ", i[1] < 0 ? std::string("cpu") : "cuda:" + std::to_string(static_cast<int>(i[1])),
              ", ", static_cast<int>(i[0]), " threads, gradients by ", i[2] > 0 ? "nccl" : comm_->backend());
  }
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  const unsigned cores = std::thread::hardware_concurrency();
  if (launch.launched && cores > 0 && kernels::num_threads() * launch.local_world > static_cast<int>(cores))
    log::warn("dist", str_cat(launch.local_world, " ranks x ", kernels::num_threads(), " threads on ", cores,
                              " cores oversubscribe this machine and slow every rank: set training.threads to ",
                              std::max(1u, cores / static_cast<unsigned>(launch.local_world)), " (or 0)"));
  const int64_t global = recipe_.training.tokens_per_batch, accum = recipe_.training.grad_accumulation;
  log::info("dist", "batch: ", log::thousands(global), " padded tokens per global batch, ~",
            log::thousands(global / world), " per rank x ", world, " ranks x ", accum,
            " accumulation = ", log::thousands(global * accum), " per optimizer step");
}

// Rank r > 0 draws its own dropout masks: its seed is derived from the run's and the rank
// (rank 0 keeps the run's, so one rank is exactly the single-process run). A resumed run
// continues each rank's stream from the checkpoint; a rank the checkpoint did not have (more
// ranks than before) starts its own stream at rank 0's counter, past anything it drew before.
void Trainer::restore_rank_dropout() {
  const int rank = comm_->rank();
  if (rank == 0) return;
  DropoutState d;
  if (static_cast<size_t>(rank) < progress_.rank_dropout.size()) {
    d = progress_.rank_dropout[static_cast<size_t>(rank)];
  } else {
    d.seed = derive_seed(static_cast<uint64_t>(recipe_.training.seed), SeedPurpose::kDropoutRank,
                         static_cast<uint64_t>(rank));
    d.counter = progress_.dropout.counter;
  }
  model_->set_dropout_state(d);
}

// Every rank's dropout stream into progress_.rank_dropout (collective): what a checkpoint
// needs to resume every rank exactly.
void Trainer::gather_rank_dropout() {
  if (solo()) {
    progress_.rank_dropout.clear();
    return;
  }
  const int world = comm_->world();
  std::vector<double> v(3 * static_cast<size_t>(world), 0.0);
  const DropoutState mine = model_->dropout_state();
  const size_t me = 3 * static_cast<size_t>(comm_->rank());
  v[me] = static_cast<double>(mine.seed >> 32);  // halves: exact in a double
  v[me + 1] = static_cast<double>(mine.seed & 0xffffffffu);
  v[me + 2] = static_cast<double>(mine.counter);
  comm_->all_reduce_host(v.data(), static_cast<int64_t>(v.size()), kernels::ReduceOp::sum);
  progress_.rank_dropout.assign(static_cast<size_t>(world), {});
  for (int r = 0; r < world; ++r) {
    const double* e = &v[3 * static_cast<size_t>(r)];
    progress_.rank_dropout[static_cast<size_t>(r)] = {(static_cast<uint64_t>(e[0]) << 32) | static_cast<uint64_t>(e[1]),
                                                      static_cast<uint64_t>(e[2])};
  }
}

// Parameters, optimizer state, progress and the data cursor from `c`; throws when any of it
// does not fit this run.
void Trainer::load_from(const Checkpoint& c) {
  if (ShardedAdamW* sharded = step_->sharded())
    sharded->load_state(load_training_checkpoint(c, *model_, progress_));
  else
    load_training_checkpoint(c, *model_, *step_->optimizer(), progress_);
  batcher_->set_position(progress_.data);
}

// Rank 0 alone touches checkpoints.dir (cleanup, --restart) and picks the checkpoint; every
// rank then loads that one (the ranks must see the same files: one machine, or a shared
// filesystem) and rank 0's parameters are broadcast, so the replicas start identical.
void Trainer::resume_or_restart() {
  const std::string& run_dir = recipe_.checkpoints.dir;
  int64_t chosen = -1;  // the step of the checkpoint to resume from
  std::optional<Checkpoint> latest;
  if (lead()) {
    create_folder_for(recipe_, "checkpoints.dir", run_dir);
    lock_ = std::make_unique<RunLock>(run_dir);
    for (const std::string& r : cleanup_incomplete_checkpoints(run_dir))
      log::info("ckpt", "removed an incomplete checkpoint left by an interrupted run: ", r);
    if (opt_.restart) {
      set_aside_previous_run(run_dir, tensorboard_dir());
    } else {
      // The newest checkpoint that passes its checksums and loads (names, shapes, progress,
      // optimizer state); each one skipped is said, with why.
      const auto all = list_checkpoints(run_dir);
      bool touched = false;  // a failed load may have changed part of the model already
      std::string reasons;
      for (auto it = all.rbegin(); it != all.rend() && chosen < 0; ++it) {
        try {
          const Checkpoint c = open_checkpoint(it->dir);
          check_resume(c, recipe_, *tok_);  // a changed model is refused, not skipped (app/resume_check.h)
          touched = true;
          load_from(c);
          chosen = it->step;
          latest = c;
        } catch (const ResumeRefused&) {
          throw;
        } catch (const Error& e) {
          log::warn("ckpt", str_cat("skipping ", it->dir, ": ", e.what()));
          reasons += str_cat("\n  ", it->dir, ": ", e.what());
        }
      }
      if (chosen < 0 && touched)
        throw Error(str_cat("no checkpoint in ", run_dir, " could be loaded:", reasons,
                            "\n--restart sets them aside and starts over"));
    }
    // A new run from another model's weights (rank 0's are broadcast below).
    if (chosen < 0 && !recipe_.model.init_from.empty()) {
      try {
        log_init_from(init_from_checkpoint(recipe_.model.init_from, *tok_, *model_));
      } catch (const ConfigError&) {
        throw;
      } catch (const InternalError&) {
        throw;
      } catch (const Error& e) {
        throw ConfigError(recipe_.where("model.init_from"), "model.init_from", e.what());
      }
    }
    // Attention transfer before a new run's training (app/linearize.h), on this rank alone.
    if (chosen < 0 && recipe_.linearize.steps > 0) {
      if (!solo())
        throw ConfigError(recipe_.where("linearize.steps"), "linearize.steps",
                          "the transfer stage runs on one rank: run it alone (a run of training.max_steps 0 is not "
                          "allowed, so give it a few steps), then resume that run under mpirun with linearize.steps 0");
      LinearizeOptions lo;
      lo.steps = recipe_.linearize.steps;
      lo.lr = recipe_.linearize.lr;
      lo.log_every = recipe_.logging.every_steps;
      const auto trained = transfer_parameters(*model_);
      int64_t values = 0;
      for (const auto& [name, p] : trained) values += p->numel();
      log::info("linearize", "attention transfer: ", lo.steps, " steps at lr ", lo.lr, ", training ", trained.size(),
                " tensors (", log::thousands(values), " values) of the new attention; everything else frozen");
      const auto start = std::chrono::steady_clock::now();
      try {
        linearize(*model_, *batcher_, lo, [&](const LinearizeProgress& p) {
          std::string terms;
          for (const auto& [name, v] : p.terms) terms += str_cat(" | ", name.substr(std::string("model.").size()), " ",
                                                                 log::number("%.4g", v));
          log::info("linearize", "step ", p.step, "/", lo.steps, " | transfer loss ", log::number("%.5g", p.loss),
                    terms, " | ",
                    log::number("%.1f", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()),
                    " s");
        });
      } catch (const InternalError&) {
        throw;
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw ConfigError(recipe_.where("linearize.steps"), "linearize.steps", e.what());
      }
      batcher_->set_position(progress_.data);  // training reads the data from its start, as without the stage
    }
  }
  if (!solo()) {
    double c = static_cast<double>(chosen);
    comm_->all_reduce_host(&c, 1, kernels::ReduceOp::max);  // only rank 0's is not -1
    chosen = static_cast<int64_t>(c);
    if (!lead() && chosen >= 0) {
      const std::string dir = checkpoint_dir(run_dir, chosen);
      TARN_CHECK(std::filesystem::exists(dir), "rank ", comm_->rank(), " cannot see ", dir,
                 ", the checkpoint rank 0 resumes from: every rank must see the same checkpoints.dir (run on one "
                 "machine, or put it on a shared filesystem)");
      latest = open_checkpoint(dir);
      load_from(*latest);
    }
  }
  if (latest) {
    last_saved_step_ = progress_.step;
    log::info("ckpt", "resumed from ", latest->dir, " (step ", log::thousands(progress_.step), ", epoch ",
              progress_.data.epoch, "); --restart starts over");
    if (!solo() && !progress_.rank_dropout.empty() && progress_.rank_dropout.size() != static_cast<size_t>(comm_->world()))
      log::warn("dist", str_cat("the checkpoint was written by ", progress_.rank_dropout.size(), " ranks and ",
                                comm_->world(), " continue it: parameters, optimizer, data order and schedule carry "
                                "on exactly; dropout masks differ from what that run would have drawn"));
  }
  restore_rank_dropout();
  if (!solo()) {
    std::vector<Tensor*> params = model_->parameters();
    broadcast_tensors(params, *grad_comm_, 0);
    check_replicas_identical(params, *comm_, "at start");
  }
}

void Trainer::setup() {
  recipe_ = load_recipe(opt_.recipe_path, opt_.overrides);
  open_communicator();
  if (lead())  // every rank reads the same recipe: said once
    for (const std::string& w : recipe_.warnings) log::warn("config", w);
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  if (!solo() && recipe_.training.device == "cuda" && opt_.communicator == nullptr)
    recipe_.training.device = "cuda:" + std::to_string(kernels::mpi::local_rank());  // my machine's GPU
  device_ = training_device(recipe_);  // before any data work: a missing GPU is reported at once
  check_recipe_files(recipe_);
  check_memory(recipe_);  // an absurd model is refused before any allocation
  log::set_color(recipe_.logging.color);
  // threads: 0 means every core; ranks sharing a machine share its cores.
  if (launch.launched && recipe_.training.threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr)
    recipe_.training.threads = std::max(1, kernels::num_threads() / std::max(1, launch.local_world));
  configure_threads(recipe_);
  open_gradient_communicator();
  log_ranks();

  // Rank 0 trains the tokenizer when it is missing; the others then load its file.
  if (lead()) tok_ = open_tokenizer(recipe_);
  if (!solo()) comm_->barrier();
  if (!lead()) tok_ = open_tokenizer(recipe_);
  const uint64_t seed = static_cast<uint64_t>(recipe_.training.seed);
  train_set_ = open_dataset(recipe_, *tok_, recipe_.data.train, seed, "train");
  if (!recipe_.data.valid.empty()) valid_set_ = open_dataset(recipe_, *tok_, recipe_.data.valid, kEvalNoiseSeed, "valid");
  if (!recipe_.data.test.empty()) test_set_ = open_dataset(recipe_, *tok_, recipe_.data.test, kEvalNoiseSeed, "test");

  const BartConfig cfg = model_config(recipe_, tok_->vocab_size());
  model_ = std::make_unique<BartForConditionalGeneration>(cfg, seed);
  model_->to(device_);  // initialised on the host (Philox), then copied: the same weights on every device
  model_->train();
  model_->set_precision(training_precision(recipe_, device_));
  log::info("model", cfg.str(), "; ", log::thousands(model_->parameter_count()), " parameters on ", device_.str());

  TrainStepOptions so;
  AdamWOptions& ao = so.adamw;
  ao.lr = static_cast<float>(recipe_.optimizer.lr);
  ao.beta1 = static_cast<float>(recipe_.optimizer.betas[0]);
  ao.beta2 = static_cast<float>(recipe_.optimizer.betas[1]);
  ao.eps = static_cast<float>(recipe_.optimizer.eps);
  ao.weight_decay = static_cast<float>(recipe_.optimizer.weight_decay);
  so.clip_norm = static_cast<float>(recipe_.optimizer.clip_norm);
  so.shard_optimizer = recipe_.training.shard_optimizer;
  so.overlap_communication = recipe_.training.overlap_communication;
  // TrainStep raises it to the 4 bytes GradientSync needs at least.
  so.bucket_bytes = static_cast<int64_t>(std::min(recipe_.training.gradient_bucket_mb * (1 << 20), 1e15));
  step_ = std::make_unique<TrainStep>(*model_, *comm_, *grad_comm_, so);
  const double mb = 1.0 / (1 << 20);
  if (const ShardedAdamW* sharded = step_->sharded())
    log::info("optim", "ZeRO-1: AdamW moments sharded over ", comm_->world(), " ranks, ",
              log::number("%.1f", 2.0 * 4 * sharded->shard_elements() * mb), " MB per rank (",
              log::number("%.1f", 2.0 * 4 * sharded->elements() * mb), " MB unsharded)");
  else if (recipe_.training.shard_optimizer)
    log::info("optim", "training.shard_optimizer has no effect on one rank");

  schedule_.kind = parse_lr_schedule_kind(recipe_.optimizer.schedule);
  schedule_.lr = ao.lr;
  schedule_.warmup_steps = recipe_.optimizer.warmup_steps;
  schedule_.total_steps = recipe_.training.max_steps > 0 ? recipe_.training.max_steps : 0;
  schedule_.min_lr = static_cast<float>(recipe_.optimizer.min_lr);
  if ((schedule_.kind == LrScheduleKind::linear || schedule_.kind == LrScheduleKind::cosine) && schedule_.total_steps == 0)
    throw ConfigError(recipe_.where("optimizer.schedule"), "optimizer.schedule",
                      recipe_.optimizer.schedule +
                          " decays to training.max_steps, which is 0 (unlimited); use inverse_sqrt or constant, or "
                          "set training.max_steps");
  schedule_.validate();

  BatcherConfig bc;
  bc.plan.max_tokens = recipe_.training.tokens_per_batch;
  bc.seed = seed;
  bc.rank = comm_->rank();
  bc.world_size = comm_->world();
  bc.split_rows = true;  // each rank its share of every global batch
  batcher_ = std::make_unique<Batcher>(*train_set_, bc);
  progress_.dropout = model_->dropout_state();

  resume_or_restart();
  elapsed_at_start_ = progress_.elapsed_s;
  if (lead()) {
    const std::string& path = recipe_.logging.metrics_file;
    if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
    }
    metrics_ = std::make_unique<MetricsFile>(path);
    if (!metrics_->good())
      throw ConfigError(recipe_.where("logging.metrics_file"), "logging.metrics_file",
                        str_cat("cannot open ", short_path(path), " for appending (", std::strerror(errno), ")"));
    if (const std::string dir = tensorboard_dir(); !dir.empty()) {
      try {
        tensorboard_ = std::make_unique<TensorBoardWriter>(dir, progress_.step);
      } catch (const Error& e) {
        throw ConfigError(recipe_.where("logging.tensorboard"), "logging.tensorboard", e.what());
      }
      for (const EventFileRewind& r : tensorboard_->rewound())
        log::info("train", "TensorBoard: ", short_path(r.path), " rewound to step ", progress_.step, " (",
                  r.dropped, " events after it dropped", r.damaged_tail ? ", a damaged last record cut" : "",
                  "), as the run resumes from there");
    }
  }
}

// One optimizer step (framework/train/step.h) over this rank's share of the next
// grad_accumulation global batches, then the run's bookkeeping.
bool Trainer::step() {
  const int64_t accum = recipe_.training.grad_accumulation;
  std::vector<Batch> batches;
  int64_t counted = 0;  // the labels the loss counts, over every rank's share
  for (int64_t i = 0; i < accum; ++i) {
    batches.push_back(batcher_->next());
    counted += batches.back().global_tgt_tokens;
  }
  const float smoothing = static_cast<float>(recipe_.training.label_smoothing);
  const auto forward = [&](int64_t k) -> std::optional<MicroBatchLoss> {
    const Batch& b = batches[static_cast<size_t>(k)];
    if (b.rows == 0) return std::nullopt;  // this rank's share of a small global batch was empty
    MicroBatchLoss m;
    const StagedInputs staged(b, kPadId, device_);  // ids, targets and padding up in one copy, no wait
    const Tensor logits = forward_batch(*model_, b, staged.src_padding);
    // The NLL stays in the loss's totals (TrainStep reads or sums it where it is).
    m.loss = seq2seq_loss(logits, staged.targets, kPadId, smoothing, &m.counted, nullptr,
                          CrossEntropyOptions{}.ignore_index, &m.totals);
    m.tokens = b.src_tokens() + b.tgt_tokens();
    return m;
  };
  const float lr = schedule_.lr_at(progress_.step);
  const StepResult r = step_->run(accum, counted, forward, lr);
  progress_.data = batcher_->position();
  progress_.dropout = model_->dropout_state();
  if (r.pending()) {
    // Deferred (on a GPU, one rank or several): the step counts as taken, and settle() says
    // later whether it applied. A skipped one keeps its number (the schedule moved on); the
    // device left the parameters, moments and update counts as they were, on every rank.
    lr_ = lr;
    model_->favor_step();
    ++progress_.step;
    pending_.push_back({progress_.step, counted});
    return true;
  }
  account(r, counted);
  if (!r.applied()) return false;
  lr_ = lr;
  model_->favor_step();  // counts the step; redraws FAVOR+ projections whose time has come
  ++progress_.step;
  return true;
}

void Trainer::account(const StepResult& r, int64_t counted) {
  if (!r.applied()) {
    ++progress_.bad_steps_in_row;
    ++progress_.skipped_steps;
    // The number the step has (deferred) or would have had (skipped at once).
    const int64_t number = pending_.empty() ? progress_.step + 1 : pending_.front().step;
    if (lead())  // agreed by every rank: said once
      log::warn("train", str_cat("step ", number, ": ",
                                 r.outcome == StepOutcome::nonfinite_loss
                                     ? "non-finite or diverged loss (over " + log::number("%.0f", kDivergedLoss) +
                                           " nats per token)"
                                     : std::string("non-finite gradient norm"),
                                 ", update skipped (", progress_.bad_steps_in_row, " in a row, ",
                                 recipe_.training.max_bad_steps, " stop the run)"));
    return;
  }
  progress_.bad_steps_in_row = 0;
  progress_.tokens_seen += r.tokens;
  tokens_this_run_ += r.tokens;
  last_grad_norm_ = r.grad_norm;
  interval_.loss_sum += r.loss_sum / static_cast<double>(counted);
  interval_.nll_sum += r.nll_sum;
  interval_.nll_tokens += counted;
  interval_.grad_norm_sum += r.grad_norm;
  interval_.tokens += r.tokens;
  ++interval_.steps;
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

void Trainer::log_progress() {
  if (interval_.steps == 0) return;
  const double secs = seconds_since(interval_.start);
  const double loss = interval_.loss_sum / static_cast<double>(interval_.steps);
  const double nll = interval_.nll_sum / static_cast<double>(std::max<int64_t>(1, interval_.nll_tokens));
  const double tps = interval_.tokens / std::max(secs, 1e-9);
  const double elapsed = elapsed_s();
  const int64_t max_steps = recipe_.training.max_steps;
  double eta = NAN;
  const double per_step = secs / static_cast<double>(interval_.steps);
  if (max_steps > 0) eta = per_step * static_cast<double>(max_steps - progress_.step);
  if (recipe_.training.max_time_minutes > 0) {
    const double left = recipe_.training.max_time_minutes * 60 - elapsed;
    eta = std::isnan(eta) ? left : std::min(eta, left);
  }
  std::string line = "step " + log::thousands(progress_.step);
  if (max_steps > 0) line += "/" + log::thousands(max_steps);
  line += " | ep " + std::to_string(progress_.data.epoch) + " | loss " + log::number("%.3f", loss) + " | ppl " +
          log::number("%.1f", std::exp(nll)) + " | lr " + log::number("%.2e", lr_) + " | gnorm " +
          log::number("%.2f", interval_.grad_norm_sum / interval_.steps) + " | " +
          log::thousands(static_cast<long long>(tps)) + " tok/s | " + log::duration(elapsed);
  if (!std::isnan(eta)) line += ", ETA " + log::duration(std::max(0.0, eta));
  log::progress("train", line);

  json::Value m = json::Value::object();
  m.set("kind", json::Value::string("train"));
  m.set("step", json::Value::number(progress_.step));
  m.set("epoch", json::Value::number(progress_.data.epoch));
  m.set("loss", metric(loss));
  m.set("nll", metric(nll));
  m.set("ppl", metric(std::exp(nll)));
  m.set("lr", json::Value::number(static_cast<double>(lr_)));
  m.set("grad_norm", metric(interval_.grad_norm_sum / interval_.steps));
  m.set("tokens_per_s", metric(tps));
  m.set("tokens_seen", json::Value::number(progress_.tokens_seen));
  m.set("elapsed_s", json::Value::number(elapsed));
  if (metrics_) metrics_->write(m);
  tensorboard_scalars({{"train/loss", loss},
                       {"train/nll", nll},
                       {"train/ppl", std::exp(nll)},
                       {"train/lr", lr_},
                       {"train/grad_norm", interval_.grad_norm_sum / interval_.steps},
                       {"train/tokens_per_s", tps},
                       {"memory/rss_mib", resident_memory().current_bytes / double(1 << 20)}});
  summary_.train_loss = loss;
  interval_.reset();
}

// The event file is a view of the run, not the run: a write that fails (a full disk, a folder
// removed) is said once and ends the event file, never the training (metrics.jsonl and the
// checkpoints go on as before).
void Trainer::tensorboard_scalars(const std::vector<std::pair<std::string, double>>& values) {
  if (!tensorboard_) return;
  try {
    tensorboard_->scalars(progress_.step, values);
  } catch (const Error& e) {
    log::warn("train", str_cat("TensorBoard: ", e.what(), "; no more events are written this run"));
    tensorboard_.reset();
  }
}

void Trainer::validate_and_maybe_save_best() {
  if (!valid_set_) return;
  const DropoutState dropout = model_->dropout_state();  // evaluation must not move the streams
  const auto start = Clock::now();
  const EvalResult r =
      evaluate(*model_, *valid_set_, recipe_.training.tokens_per_batch, recipe_.validation.max_batches, comm_);
  model_->set_dropout_state(dropout);
  summary_.valid = r;
  // A non-finite validation loss (a diverged model) is never the best.
  const bool improved = std::isfinite(r.mean_nll()) && (!progress_.has_best || r.mean_nll() < progress_.best_val_nll);
  if (improved) {
    progress_.has_best = true;
    progress_.best_val_nll = r.mean_nll();
    progress_.best_step = progress_.step;
    progress_.evals_without_improvement = 0;
  } else {
    ++progress_.evals_without_improvement;
  }
  // Memory so far: the allocator's live high water on the training device (what the model
  // and its steps needed) beside the process's resident peak (what the machine paid).
  const MemoryStats mem = memory_stats(device_);
  const ResidentMemory rss = resident_memory();
  summary_.live_peak_bytes = mem.high_water_bytes;
  summary_.rss_peak_bytes = rss.peak_bytes;
  const double elapsed = elapsed_s();
  log::info("valid", "step ", log::thousands(progress_.step), " | nll ", log::number("%.4f", r.mean_nll()),
            " | ppl ", log::number("%.2f", r.perplexity()), " over ", log::thousands(r.tokens), " tokens (", r.batches,
            " batches, ", log::duration(seconds_since(start)), ") | ", log::duration(elapsed), " | mem live peak ",
            log::mebibytes(mem.high_water_bytes), device_.is_cpu() ? "" : " on " + device_.str(), ", RSS peak ",
            log::mebibytes(rss.peak_bytes), improved ? " | best so far" : "");
  json::Value m = json::Value::object();
  m.set("kind", json::Value::string("valid"));
  m.set("step", json::Value::number(progress_.step));
  m.set("nll", metric(r.mean_nll()));
  m.set("ppl", metric(r.perplexity()));
  m.set("tokens", json::Value::number(r.tokens));
  m.set("best", json::Value::boolean(improved));
  m.set("tokens_seen", json::Value::number(progress_.tokens_seen));
  m.set("elapsed_s", json::Value::number(elapsed));
  m.set("memory_live_peak_bytes", json::Value::number(static_cast<double>(mem.high_water_bytes)));
  m.set("memory_cached_bytes", json::Value::number(static_cast<double>(mem.cached_bytes)));
  m.set("rss_peak_bytes", json::Value::number(static_cast<double>(rss.peak_bytes)));
  if (metrics_) metrics_->write(m);
  tensorboard_scalars({{"valid/nll", r.mean_nll()},
                       {"valid/ppl", r.perplexity()},
                       {"memory/rss_peak_mib", rss.peak_bytes / double(1 << 20)},
                       {"memory/live_peak_mib", mem.high_water_bytes / double(1 << 20)}});
  if (improved && recipe_.checkpoints.keep_best) {
    save("best validation");
    if (lead()) set_best_checkpoint(recipe_.checkpoints.dir, progress_.step);
  }
}

// Collective on every rank (the dropout streams are gathered); rank 0 alone writes. The
// others go on and meet rank 0 again at the next step's collectives.
void Trainer::save(const char* why) {
  if (last_saved_step_ == progress_.step) return;
  gather_rank_dropout();
  // ZeRO-1: the full optimizer state, assembled from every rank's shard (collective).
  const AdamWState optimizer_state =
      step_->sharded() ? step_->sharded()->gather_state() : step_->optimizer()->state_view();
  last_saved_step_ = progress_.step;
  summary_.checkpoint = checkpoint_dir(recipe_.checkpoints.dir, progress_.step);
  if (!lead()) return;
  progress_.elapsed_s = elapsed_s();
  capture_favor_state(*model_, progress_);
  const auto start = Clock::now();
  save_training_checkpoint(recipe_.checkpoints.dir, recipe_, *tok_, *model_, optimizer_state, progress_);
  log::info("ckpt", "saved ", summary_.checkpoint, " (", why, ", ", log::duration(seconds_since(start)), ")");
  if (recipe_.checkpoints.keep_last > 0)
    prune_checkpoints(recipe_.checkpoints.dir, static_cast<int>(recipe_.checkpoints.keep_last));
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
  at.elapsed_s = elapsed_s();
  at.bad_steps_in_row = progress_.bad_steps_in_row;
  at.evals_without_improvement = progress_.evals_without_improvement;
  return agreed_stop_reason(limits, at, *comm_);
}

TrainSummary Trainer::run() {
  setup();
  install_stop_handlers();
  run_start_ = Clock::now();
  interval_.reset();
  const int64_t start_step = progress_.step;
  log::info("train", "training from step ", log::thousands(progress_.step), " on ",
            log::thousands(static_cast<long long>(train_set_->size())), " examples, ",
            log::thousands(recipe_.training.tokens_per_batch), " tokens per batch; metrics in ",
            recipe_.logging.metrics_file,
            tensorboard_ ? str_cat(", TensorBoard: tensorboard --logdir ", recipe_.logging.tensorboard) : std::string());
  Cadence cadence;
  cadence.log_every = recipe_.logging.every_steps;
  cadence.check_replicas_every = solo() ? 0 : recipe_.training.check_replicas_every_steps;
  cadence.validate_every = recipe_.validation.every_steps;
  cadence.checkpoint_every = recipe_.checkpoints.every_steps;
  StopReason reason = stop_reason();
  while (reason == StopReason::none) {
    if (step()) {
      const int64_t s = progress_.step;
      // Deferred results are read here and nowhere else in the loop: every periodic action
      // reads the device anyway, and a run of bad steps is seen at worst one interval late.
      if (cadence.logs_at(s) || cadence.checks_replicas_at(s) || cadence.validates_at(s) || cadence.checkpoints_at(s))
        settle();
      // Too many bad steps among those just read: nothing more is logged, validated or saved.
      if (progress_.bad_steps_in_row < recipe_.training.max_bad_steps) {
        if (cadence.logs_at(s)) log_progress();
        if (cadence.checks_replicas_at(s))
          check_replicas_identical(model_->parameters(), *comm_, "after step " + std::to_string(s));
        if (cadence.validates_at(s)) validate_and_maybe_save_best();
        if (cadence.checkpoints_at(s)) save("every_steps");
      }
    }
    reason = stop_reason();
  }
  settle();
  // A stop for another reason (max_steps, a signal) may find the last steps bad only now.
  if (progress_.bad_steps_in_row >= recipe_.training.max_bad_steps && !stopped_by_signal(reason))
    reason = StopReason::bad_steps;
  log_progress();
  log::end_progress();
  summary_.failed = reason == StopReason::bad_steps;
  if (summary_.failed) {
    log::line("train", str_cat("stopped: ", progress_.bad_steps_in_row,
                               " steps in a row had a non-finite or diverged loss or gradient; ",
                               last_saved_step_ >= 0
                                   ? "the last good checkpoint (" + checkpoint_dir(recipe_.checkpoints.dir, last_saved_step_) +
                                         ") is intact"
                                   : std::string("no checkpoint had been written yet"),
                               ". Lower optimizer.lr or check the data."));
  } else {
    if (cadence.validates_at_end(reason, progress_.step)) validate_and_maybe_save_best();
    save(stop_reason_name(reason));
  }
  summary_.steps = progress_.step;
  summary_.steps_this_run = progress_.step - start_step;
  summary_.stop_reason = stop_reason_name(reason);
  summary_.wall_s = seconds_since(run_start_);
  summary_.tokens_per_s = tokens_this_run_ / std::max(summary_.wall_s, 1e-9);
  summary_.comm_s = step_->comm_seconds();
  summary_.buckets_started_early = step_->buckets_started_early();
  if (test_set_ && !summary_.failed && !stopped_by_signal(reason)) {
    summary_.test = evaluate(*model_, *test_set_, recipe_.training.tokens_per_batch, 0, comm_);
    tensorboard_scalars({{"test/nll", summary_.test->mean_nll()}, {"test/ppl", summary_.test->perplexity()}});
    log::info("test", "nll ", log::number("%.4f", summary_.test->mean_nll()), " | ppl ",
              log::number("%.2f", summary_.test->perplexity()), " over ", log::thousands(summary_.test->tokens),
              " target tokens (", recipe_.data.test, ")");
  }
  if (!solo()) {
    comm_->barrier();  // every rank returns once rank 0's last checkpoint is written
    const int64_t steps = std::max<int64_t>(1, summary_.steps_this_run);
    const double comm_s = step_->comm_seconds();
    log::info("dist", "gradient ", step_->sharded() ? "reduce-scatter + all-gather" : "all-reduce", ": ",
              log::number("%.2f", 1e3 * comm_s / static_cast<double>(steps)),
              " ms per step on rank 0 (waiting for the other ranks included), ",
              log::number("%.1f", 100.0 * comm_s / std::max(summary_.wall_s, 1e-9)),
              "% of the run; ", log::thousands(step_->reduced_elements()),
              " floats per step", overlap_note(steps));
  }
  if (model_->precision() == Precision::bf16 && device_.is_cpu())  // primitives are kept by shape: few after warm-up
    log::info("train", "bf16: ", kernels::cpu::bf16_gemm_primitives_created(), " oneDNN matmul primitives made");
  log::info("train", "stopped (", stop_reason_name(reason), ") at step ", log::thousands(progress_.step), " after ",
            log::duration(summary_.wall_s), "; ", log::thousands(static_cast<long long>(summary_.tokens_per_s)),
            " tok/s over this run; last checkpoint ", summary_.checkpoint);
  return summary_;
}

}  // namespace

TrainSummary train(const TrainOptions& options) { return Trainer(options).run(); }

}  // namespace tarn::app
