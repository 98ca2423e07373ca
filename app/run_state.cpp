#include "app/run_state.h"

#include <ctime>
#include <filesystem>
#include <optional>

#include "data/seed.h"
#include "framework/config/config_error.h"
#include "framework/distributed/parameter_sync.h"
#include "framework/io/checkpoint_dir.h"
#include "framework/log/log.h"
#include "framework/log/tensorboard.h"
#include "app/checkpoint_state.h"
#include "app/init_from.h"
#include "app/linearize.h"
#include "app/resume_check.h"
#include "app/session.h"
#include "app/train_metrics.h"

namespace tarn::app {
namespace {

// Parameters, optimizer state, progress and the data cursor from `c`; throws when any of it
// does not fit this run.
void load_from(const Checkpoint& c, const RunParts& run) {
  if (ShardedAdamW* sharded = run.step.sharded())
    sharded->load_state(load_training_checkpoint(c, run.model, run.progress));
  else
    load_training_checkpoint(c, run.model, *run.step.optimizer(), run.progress);
  run.batcher.set_position(run.progress.data);
}

struct Resumed {
  int64_t step = -1;
  Checkpoint checkpoint;
};

// The newest checkpoint that passes its checksums and loads (names, shapes, progress, optimizer
// state), loaded into `run`; each one skipped is said, with why. Nothing when there is none.
std::optional<Resumed> resume_newest(const RunParts& run) {
  const std::string& run_dir = run.recipe.checkpoints.dir;
  const auto all = list_checkpoints(run_dir);
  bool touched = false;  // a failed load may have changed part of the model already
  std::string reasons;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      const Checkpoint c = open_checkpoint(it->dir);
      check_resume(c, run.recipe, run.tokenizer);  // a changed model is refused, not skipped (app/resume_check.h)
      touched = true;
      load_from(c, run);
      return Resumed{it->step, c};
    } catch (const ResumeRefused&) {
      throw;
    } catch (const Error& e) {
      log::warn("ckpt", str_cat("skipping ", it->dir, ": ", e.what()));
      reasons += str_cat("\n  ", it->dir, ": ", e.what());
    }
  }
  if (touched)
    throw Error(str_cat("no checkpoint in ", run_dir, " could be loaded:", reasons,
                        "\n--restart sets them aside and starts over"));
  return std::nullopt;
}

// A new run from another model's weights (model.init_from).
void init_from_other_model(const RunParts& run) {
  try {
    log_init_from(init_from_checkpoint(run.recipe.model.init_from, run.tokenizer, run.model));
  } catch (const ConfigError&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(run.recipe.where("model.init_from"), "model.init_from", e.what());
  }
}

// Attention transfer before a new run's training (app/linearize.h), on this rank alone.
void transfer_attention(const RunParts& run, const Ranks& ranks) {
  const Recipe& recipe = run.recipe;
  if (!ranks.solo())
    throw ConfigError(recipe.where("linearize.steps"), "linearize.steps",
                      "the transfer stage runs on one rank: run it alone (a run of training.max_steps 0 is not "
                      "allowed, so give it a few steps), then resume that run under mpirun with linearize.steps 0");
  LinearizeOptions lo;
  lo.steps = recipe.linearize.steps;
  lo.lr = recipe.linearize.lr;
  lo.log_every = recipe.logging.every_steps;
  const auto trained = transfer_parameters(run.model);
  int64_t values = 0;
  for (const auto& [name, p] : trained) values += p->numel();
  log::info("linearize", "attention transfer: ", lo.steps, " steps at lr ", lo.lr, ", training ", trained.size(),
            " tensors (", log::thousands(values), " values) of the new attention; everything else frozen");
  const auto start = std::chrono::steady_clock::now();
  try {
    linearize(run.model, run.batcher, lo, [&](const LinearizeProgress& p) {
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
    throw ConfigError(recipe.where("linearize.steps"), "linearize.steps", e.what());
  }
  run.batcher.set_position(run.progress.data);  // training reads the data from its start, as without the stage
}

}  // namespace

void RunState::start(const RunParts& run, const Ranks& ranks, bool restart) {
  run.progress.dropout = run.model.dropout_state();
  const std::string& run_dir = run.recipe.checkpoints.dir;
  int64_t chosen = -1;  // the step of the checkpoint to resume from
  std::optional<Checkpoint> latest;
  if (ranks.lead()) {
    create_folder_for(run.recipe, "checkpoints.dir", run_dir);
    lock_ = std::make_unique<RunLock>(run_dir);
    for (const std::string& r : cleanup_incomplete_checkpoints(run_dir))
      log::info("ckpt", "removed an incomplete checkpoint left by an interrupted run: ", r);
    if (restart) {
      set_aside_previous_run(run_dir, tensorboard_folder(run.recipe));
    } else if (std::optional<Resumed> r = resume_newest(run)) {
      chosen = r->step;
      latest = r->checkpoint;
    }
    if (chosen < 0 && !run.recipe.model.init_from.empty()) init_from_other_model(run);  // rank 0's are broadcast below
    if (chosen < 0 && run.recipe.linearize.steps > 0) transfer_attention(run, ranks);
  }
  if (!ranks.solo()) {
    kernels::Communicator& comm = ranks.control();
    double c = static_cast<double>(chosen);
    comm.all_reduce_host(&c, 1, kernels::ReduceOp::max);  // only rank 0's is not -1
    chosen = static_cast<int64_t>(c);
    if (!ranks.lead() && chosen >= 0) {
      const std::string dir = checkpoint_dir(run_dir, chosen);
      TARN_CHECK(std::filesystem::exists(dir), "rank ", comm.rank(), " cannot see ", dir,
                 ", the checkpoint rank 0 resumes from: every rank must see the same checkpoints.dir (run on one "
                 "machine, or put it on a shared filesystem)");
      latest = open_checkpoint(dir);
      load_from(*latest, run);
    }
  }
  const Progress& progress = run.progress;
  if (latest) {
    last_saved_step_ = progress.step;
    log::info("ckpt", "resumed from ", latest->dir, " (step ", log::thousands(progress.step), ", epoch ",
              progress.data.epoch, "); --restart starts over");
    if (!ranks.solo() && !progress.rank_dropout.empty() && progress.rank_dropout.size() != static_cast<size_t>(ranks.world()))
      log::warn("dist", str_cat("the checkpoint was written by ", progress.rank_dropout.size(), " ranks and ",
                                ranks.world(), " continue it: parameters, optimizer, data order and schedule carry "
                                "on exactly; dropout masks differ from what that run would have drawn"));
  }
  if (!ranks.lead())
    run.model.set_dropout_state(rank_dropout_state(progress, ranks.rank(), static_cast<uint64_t>(run.recipe.training.seed)));
  if (!ranks.solo()) {
    std::vector<Tensor*> params = run.model.parameters();
    broadcast_tensors(params, ranks.gradients(), 0);
    check_replicas_identical(params, ranks.control(), "at start");
  }
  elapsed_before_ = progress.elapsed_s;
}

void RunState::start_clock() { clock_start_ = Clock::now(); }
double RunState::this_run_s() const { return std::chrono::duration<double>(Clock::now() - clock_start_).count(); }
double RunState::elapsed_s() const { return elapsed_before_ + this_run_s(); }

void RunState::save(const RunParts& run, const Ranks& ranks, const char* why) {
  Progress& progress = run.progress;
  if (last_saved_step_ == progress.step) return;
  progress.rank_dropout = gather_rank_dropout(run.model.dropout_state(), ranks.control());
  // ZeRO-1: the full optimizer state, assembled from every rank's shard (collective).
  const AdamWState optimizer_state =
      run.step.sharded() ? run.step.sharded()->gather_state() : run.step.optimizer()->state_view();
  const std::string& run_dir = run.recipe.checkpoints.dir;
  last_saved_step_ = progress.step;
  last_checkpoint_ = checkpoint_dir(run_dir, progress.step);
  if (!ranks.lead()) return;  // the others go on and meet rank 0 again at the next step's collectives
  progress.elapsed_s = elapsed_s();
  capture_favor_state(run.model, progress);
  const auto start = Clock::now();
  save_training_checkpoint(run_dir, run.recipe, run.tokenizer, run.model, optimizer_state, progress);
  log::info("ckpt", "saved ", last_checkpoint_, " (", why, ", ",
            log::duration(std::chrono::duration<double>(Clock::now() - start).count()), ")");
  if (run.recipe.checkpoints.keep_last > 0) prune_checkpoints(run_dir, static_cast<int>(run.recipe.checkpoints.keep_last));
}

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

DropoutState rank_dropout_state(const Progress& progress, int rank, uint64_t run_seed) {
  if (static_cast<size_t>(rank) < progress.rank_dropout.size()) return progress.rank_dropout[static_cast<size_t>(rank)];
  DropoutState d;
  d.seed = derive_seed(run_seed, SeedPurpose::kDropoutRank, static_cast<uint64_t>(rank));
  d.counter = progress.dropout.counter;
  return d;
}

std::vector<DropoutState> gather_rank_dropout(const DropoutState& mine, kernels::Communicator& comm) {
  const int world = comm.world();
  if (world == 1) return {};
  std::vector<double> v(3 * static_cast<size_t>(world), 0.0);
  const size_t me = 3 * static_cast<size_t>(comm.rank());
  v[me] = static_cast<double>(mine.seed >> 32);  // halves: exact in a double
  v[me + 1] = static_cast<double>(mine.seed & 0xffffffffu);
  v[me + 2] = static_cast<double>(mine.counter);
  comm.all_reduce_host(v.data(), static_cast<int64_t>(v.size()), kernels::ReduceOp::sum);
  std::vector<DropoutState> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const double* e = &v[3 * static_cast<size_t>(r)];
    all[static_cast<size_t>(r)] = {(static_cast<uint64_t>(e[0]) << 32) | static_cast<uint64_t>(e[1]),
                                   static_cast<uint64_t>(e[2])};
  }
  return all;
}

}  // namespace tarn::app
