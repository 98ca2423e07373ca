#pragma once
// One optimizer step of data-parallel training, for any Module and any loss (docs/design.md
// section 5). The caller draws the step's micro-batches and hands in, for each, its forward:
// the loss (a mean over the target tokens it counts) with those counts. On every rank:
//   1. each micro-batch's backward is weighted by its share of the step's target tokens over
//      all ranks, so the summed gradient is that of the mean over every token of the step; the
//      last backward is observed by GradientSync, which starts each bucket's all-reduce as soon
//      as its gradients are final;
//   2. one control all-reduce agrees on what every rank saw: a non-finite loss anywhere, the
//      loss and NLL sums, the token count, and which parameters any rank has a gradient for;
//   3. a non-finite or diverged mean loss (over `diverged_loss` nats per token) skips the update
//      on every rank;
//   4. the gradient buckets complete (in place: they are slices of the module's ParameterArena);
//      AdamW::fused_step takes the global norm and the update of the whole arena with the
//      clipping factor to `clip_norm` folded in, in one call, or, with shard_optimizer on
//      several ranks, ZeRO-1 does reduce-scatter, the norm, the shard's clipped update and
//      all-gather in one call; a non-finite gradient norm skips too.
// The constructor flattens the module's parameters into that arena (Module::flatten_parameters).
// The gradients are zeroed after every step, applied or skipped. Every rank gets the same
// outcome. One rank communicates nothing.
//
// Deferred results (on a CUDA device, or TrainStepOptions::defer_results): the step reads
// nothing back. Each micro-batch's loss is added to a StepRecord where the step runs
// (kernels/optim.h); on several ranks the records are all-gathered by the gradients'
// communicator and added there in rank order (the bits of step 2's host sums), while the host
// agrees only on what it knows without the device (tokens, gradient mask); the step judges the
// mean there, and the fused update skips itself there when the loss or the norm is bad. run()
// returns StepOutcome::pending and settle() reads the records of every pending step at once (the
// trainer does it when it logs, validates or checkpoints; every rank holds the same records, so
// each reads its own). ZeRO-1's shard update decides where it runs too (ShardedAdamW::step).
//
//   TrainStep step(model, control, gradients, options);
//   StepResult r = step.run(micro_batches, global_target_tokens, forward_of, lr);
//   if (r.pending()) ... later: for (const StepResult& s : step.settle()) ...
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "framework/distributed/gradient_sync.h"
#include "framework/distributed/sharded_adamw.h"
#include "framework/module.h"
#include "framework/optim/adamw.h"
#include "kernels/collectives.h"

namespace tarn {

// A mean loss above this many nats per target token has diverged: its perplexity overflows a
// double (e^709.8), and no run recovers from there. Such a step is treated as a non-finite one.
constexpr double kDivergedLoss = 700;

struct TrainStepOptions {
  AdamWOptions adamw;               // lr is set by each run()
  float clip_norm = 0;              // global gradient-norm clipping; 0 = none (the norm is still measured)
  bool shard_optimizer = false;     // ZeRO-1 when there are several ranks (no effect on one)
  bool overlap_communication = true;  // start the gradient all-reduce during the last backward
  int64_t bucket_bytes = GradientSync::kDefaultBucketBytes;  // raised to GradientSync's least, 4
  double diverged_loss = kDivergedLoss;
  // Leave each step's loss and norm where the step runs until settle() (see above): automatic
  // is a CUDA device (where a read back waits for every kernel before it); yes forces it
  // anywhere (tests on the CPU); no reads every step back at once.
  enum class Defer { automatic, yes, no };
  Defer defer_results = Defer::automatic;
};

// The forward of one micro-batch on this rank.
struct MicroBatchLoss {
  Tensor loss;          // scalar: the mean over the `counted` target tokens
  int64_t counted = 0;  // target tokens the loss counts
  double nll = 0;       // their summed negative log-likelihood (for perplexity), unless `totals`
  // cross_entropy's sums where they lie (framework/ops/nn.h), if the loss has them: the NLL is
  // then taken from there, on the device when results are deferred, and `nll` is not read.
  Tensor totals;
  int64_t tokens = 0;   // tokens processed (source and target: throughput)
};

// pending: the step ran with deferred results; settle() says what it was.
enum class StepOutcome { applied, nonfinite_loss, nonfinite_gradient, pending };
const char* step_outcome_name(StepOutcome outcome);  // "applied", "non-finite loss", ...

// Agreed over the ranks (the same on each).
struct StepResult {
  StepOutcome outcome = StepOutcome::applied;
  double loss_sum = 0;   // sum over micro-batches of loss x counted, over every rank
  double nll_sum = 0;
  int64_t tokens = 0;
  double grad_norm = 0;  // before clipping; 0 when the loss was not finite
  bool applied() const { return outcome == StepOutcome::applied; }
  bool pending() const { return outcome == StepOutcome::pending; }  // only tokens is known yet
};

class TrainStep {
 public:
  // The module, the communicators and the options must outlive the step. `control` carries
  // host values (one all-reduce per step); `gradients` the gradients (NCCL on GPUs; it may be
  // `control` itself).
  TrainStep(Module& module, kernels::Communicator& control, kernels::Communicator& gradients,
            const TrainStepOptions& options);

  // Runs micro-batches 0 .. count-1: forward(k) is micro-batch k's forward on this rank, or
  // nullopt when this rank's share of it is empty. `global_counted` is the target tokens the
  // step counts over every rank (the weights' denominator). `lr` is used when the update is
  // applied. A non-finite loss stops the forwards of this rank early; the ranks still agree.
  StepResult run(int64_t count, int64_t global_counted,
                 const std::function<std::optional<MicroBatchLoss>(int64_t)>& forward, float lr);

  // Whether run() defers its results (TrainStepOptions::defer_results, decided at construction).
  bool defers() const { return defer_; }
  // Steps run since the last settle() whose results are not read yet.
  int64_t pending_steps() const { return static_cast<int64_t>(pending_.size() + settled_.size()); }
  // The results of those steps, oldest first (one read back of their records; nothing when
  // none is pending). After it the optimizer's step counts are read back when asked for.
  std::vector<StepResult> settle();

  // One of these holds the optimizer state (checkpoints read and load it).
  AdamW* optimizer() { return plain_.get(); }
  ShardedAdamW* sharded() { return sharded_.get(); }

  bool solo() const { return control_.world() == 1; }
  // Over every run() so far: seconds inside the gradient collectives (not hidden by compute),
  // and buckets started during a backward.
  double comm_seconds() const { return comm_s_; }
  int64_t buckets_started_early() const { return early_buckets_; }
  // Floats reduced per step; gradient buckets (0 with ZeRO-1).
  int64_t reduced_elements() const;
  int64_t buckets() const { return sync_ ? sync_->buckets() : 0; }

 private:
  Module& module_;
  kernels::Communicator& control_;
  kernels::Communicator& gradients_;
  TrainStepOptions options_;
  std::unique_ptr<AdamW> plain_;          // one rank, or plain data-parallel
  std::unique_ptr<ShardedAdamW> sharded_;  // ZeRO-1 on several ranks
  std::unique_ptr<GradientSync> sync_;     // with plain_
  double comm_s_ = 0;
  int64_t early_buckets_ = 0;

  // One StepRecord per step not yet settled (kRecords of them in the arena's memory, an f32
  // tensor used as storage; slot 0 serves the steps read at once). When every slot is taken,
  // run() reads them back into settled_ before it starts the next step.
  static constexpr int64_t kRecords = 64;
  static constexpr int64_t kRecordFloats = sizeof(kernels::cpu::StepRecord) / sizeof(float);
  static_assert(sizeof(kernels::cpu::StepRecord) % sizeof(float) == 0, "a StepRecord is whole floats");
  kernels::cpu::StepRecord* record(int64_t slot) const;
  std::vector<StepResult> read_records(int64_t count) const;
  bool defer_ = false;
  Tensor records_;
  Tensor gathered_;                     // several ranks: every rank's record of this step
  std::vector<int64_t> pending_;        // tokens of each pending step, in record order
  std::vector<StepResult> settled_;     // read back early, not yet handed out
};

}  // namespace tarn
