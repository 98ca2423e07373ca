#include "framework/train/step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/backend.h"
#include "framework/ops/nn.h"

namespace tarn {

const char* step_outcome_name(StepOutcome outcome) {
  static const char* const kNames[] = {"applied", "non-finite or diverged loss", "non-finite gradient norm",
                                       "pending"};
  return kNames[static_cast<int>(outcome)];
}

TrainStep::TrainStep(Module& module, kernels::Communicator& control, kernels::Communicator& gradients,
                     const TrainStepOptions& options)
    : module_(module), control_(control), gradients_(gradients), options_(options) {
  const bool shard = options_.shard_optimizer && !solo();
  // The parameters and gradients live in one arena (framework/parameter_arena.h): buckets and
  // ZeRO-1 shards are ranges of it, and the fused update walks it. ZeRO-1 splits it into a
  // shard per rank.
  const ParameterArena& arena = module_.flatten_parameters(shard ? gradients.world() : 1);
  if (shard) {
    sharded_ = std::make_unique<ShardedAdamW>(arena, module_.named_parameters(), options_.adamw, gradients);
  } else {
    plain_ = std::make_unique<AdamW>(module_.named_parameters(), options_.adamw);
    plain_->use_arena(arena);
    sync_ = std::make_unique<GradientSync>(arena, module_.parameters(), gradients,
                                           std::max<int64_t>(4, options_.bucket_bytes));
  }
  using Defer = TrainStepOptions::Defer;
  defer_ = options_.defer_results == Defer::yes ||
           (options_.defer_results == Defer::automatic && arena.device().is_cuda());
  records_ = Tensor::zeros(Shape{kRecords * kRecordFloats}, arena.device());
  // Several ranks agree on a deferred record by all-gathering its bytes (kRecordFloats floats a
  // rank) and adding them where they land (step_record_agree).
  if (defer_ && !solo()) gathered_ = Tensor::zeros(Shape{control_.world() * kRecordFloats}, arena.device());
}

int64_t TrainStep::reduced_elements() const { return sharded_ ? sharded_->elements() : sync_->elements(); }

kernels::cpu::StepRecord* TrainStep::record(int64_t slot) const {
  return reinterpret_cast<kernels::cpu::StepRecord*>(records_.device_f32()) + slot;
}

// The results of records [0, count), as run() would have returned them at once: a bad loss
// reports no norm; the norm is rounded to f32 when clipping, as clip_grad_norm() reports it.
std::vector<StepResult> TrainStep::read_records(int64_t count) const {
  std::vector<kernels::cpu::StepRecord> host(static_cast<size_t>(count));
  if (count > 0)
    backend_for(records_.device())
        .copy_device_to_host(host.data(), record(0), host.size() * sizeof(kernels::cpu::StepRecord),
                             records_.device().index);
  std::vector<StepResult> out;
  for (const kernels::cpu::StepRecord& rec : host) {
    StepResult r;
    r.loss_sum = rec.loss_sum;
    r.nll_sum = rec.nll_sum;
    if (rec.loss_bad) {
      r.outcome = StepOutcome::nonfinite_loss;
    } else {
      r.grad_norm = options_.clip_norm > 0 ? static_cast<double>(static_cast<float>(rec.update.norm)) : rec.update.norm;
      r.outcome = rec.update.applied ? StepOutcome::applied : StepOutcome::nonfinite_gradient;
    }
    out.push_back(r);
  }
  return out;
}

std::vector<StepResult> TrainStep::settle() {
  std::vector<StepResult> out = std::move(settled_);
  settled_.clear();
  std::vector<StepResult> read = read_records(static_cast<int64_t>(pending_.size()));
  for (size_t i = 0; i < read.size(); ++i) {
    read[i].tokens = pending_[i];
    out.push_back(read[i]);
  }
  pending_.clear();
  return out;
}

StepResult TrainStep::run(int64_t count, int64_t global_counted,
                          const std::function<std::optional<MicroBatchLoss>(int64_t)>& forward, float lr) {
  if (defer_ && static_cast<int64_t>(pending_.size()) == kRecords) {  // every record taken: read them
    std::vector<StepResult> read = settle();
    settled_ = std::move(read);
  }
  // This step's record: the next free one when deferring, else the first (read before run returns).
  const int64_t slot = defer_ ? static_cast<int64_t>(pending_.size()) : 0;
  kernels::cpu::StepRecord* rec = record(slot);
  const kernels::Backend& k = backend_for(records_.device());
  k.fill(reinterpret_cast<float*>(rec), static_cast<int64_t>(sizeof *rec / sizeof(float)), 0.0f);

  StepResult r;
  bool finite = true;
  const bool overlap = sync_ && !solo() && options_.overlap_communication;
  for (int64_t i = 0; i < count; ++i) {
    const std::optional<MicroBatchLoss> m = forward(i);
    if (!m) continue;  // this rank's share of a small global batch was empty
    const kernels::cpu::CrossEntropyTotals* totals = m->totals.defined() ? cross_entropy_totals(m->totals) : nullptr;
    if (defer_) {
      // Added up where the loss is: nothing read back (a bad loss is flagged there).
      TARN_ASSERT(m->loss.device() == records_.device(), "TrainStep: the loss is on ", m->loss.device().str(),
                  ", the parameters on ", records_.device().str());
      k.step_record_add(rec, m->loss.device_f32(), m->counted, totals, m->nll);
    } else {
      const double l = m->loss.item();
      if (!std::isfinite(l)) {
        finite = false;
        break;
      }
      r.loss_sum += l * static_cast<double>(m->counted);
      double nll = m->nll;
      if (totals) {
        kernels::cpu::CrossEntropyTotals host;
        k.copy_device_to_host(&host, totals, sizeof host, m->totals.device().index);
        nll = host.nll;
      }
      r.nll_sum += nll;
    }
    // Each micro-batch's mean weighted by its share of the step's tokens over all ranks (a
    // mean of per-rank means is not the mean when the shares differ in length).
    const Tensor weight = Tensor::full(Shape{}, static_cast<float>(m->counted) / static_cast<float>(global_counted),
                                       m->loss.device());
    std::optional<ObserveBackward> observe;
    if (overlap && i + 1 == count) observe.emplace(*sync_);
    m->loss.backward(weight);
    r.tokens += m->tokens;
  }

  std::vector<double> grad_mask;  // several ranks: which parameters any rank has a gradient for
  if (defer_) {  // the loss is judged and the update decided where they run
    if (!solo()) {
      // The buckets not started during the backward start now (on every rank, whatever its
      // loss). The host agrees on what only the host knows (tokens, which parameters have a
      // gradient), the device on the records: no rank reads its record back.
      if (sync_) sync_->start_remaining();
      std::vector<double> control = {static_cast<double>(r.tokens)};
      const std::vector<double> mask = sharded_ ? sharded_->local_grad_mask() : sync_->local_grad_mask();
      control.insert(control.end(), mask.begin(), mask.end());
      control_.all_reduce_host(control.data(), static_cast<int64_t>(control.size()), kernels::ReduceOp::sum);
      r.tokens = static_cast<int64_t>(control[0]);
      grad_mask.assign(control.begin() + 1, control.end());
      gradients_.start_all_gather(reinterpret_cast<const float*>(rec), gathered_.device_f32(), kRecordFloats)->wait();
      k.step_record_agree(rec, reinterpret_cast<const kernels::cpu::StepRecord*>(gathered_.device_f32()),
                          control_.world());
    }
    k.step_record_judge(rec, global_counted, options_.diverged_loss);
    if (sharded_) {  // reduce-scatter, norm, the shard's update (or not), all-gather, on every rank
      sharded_->step(grad_mask, options_.clip_norm, lr, &rec->loss_bad, &rec->update);
      comm_s_ += sharded_->last_comm_seconds();
    } else {
      if (!solo()) {
        sync_->finish(grad_mask);
        comm_s_ += sync_->last_comm_seconds();
        early_buckets_ += sync_->last_buckets_started_early();
      }
      plain_->set_lr(lr);
      plain_->fused_step(options_.clip_norm, &rec->loss_bad, &rec->update);
    }
    module_.zero_grad();
    pending_.push_back(r.tokens);
    r.outcome = StepOutcome::pending;
    return r;
  }

  if (!solo()) {
    // Every bucket not started during the backward starts now, on every rank (whatever its
    // loss), so that all ranks make the same collectives. One control reduction agrees on the
    // rest; then the buckets complete and are unpacked.
    if (sync_) sync_->start_remaining();
    std::vector<double> control = {finite ? 0.0 : 1.0, r.loss_sum, r.nll_sum, static_cast<double>(r.tokens)};
    const std::vector<double> mask = sharded_ ? sharded_->local_grad_mask() : sync_->local_grad_mask();
    control.insert(control.end(), mask.begin(), mask.end());
    control_.all_reduce_host(control.data(), static_cast<int64_t>(control.size()), kernels::ReduceOp::sum);
    finite = control[0] == 0.0;
    r.loss_sum = control[1];
    r.nll_sum = control[2];
    r.tokens = static_cast<int64_t>(control[3]);
    grad_mask.assign(control.begin() + 4, control.end());
  }
  // On the agreed sum: every rank reaches the same answer.
  if (finite && !(r.loss_sum / static_cast<double>(global_counted) <= options_.diverged_loss)) finite = false;
  const bool loss_finite = finite;
  if (!solo() && !sharded_) {  // also when the step is skipped: the buckets were started
    sync_->finish(grad_mask);
    comm_s_ += sync_->last_comm_seconds();
    early_buckets_ += sync_->last_buckets_started_early();
  }
  // The norm, the clipping factor and the update in one call over the arena (AdamW::fused_step),
  // or ZeRO-1's reduce-scatter, norm, shard update and all-gather in one call, whose outcome is
  // read back at once: the norm must be complete before any update, and the update reads each
  // gradient scaled by the factor instead of a pass that scales them first (the same bits). A
  // norm that is not finite skips the update there.
  if (finite) {
    if (sharded_) {
      sharded_->step(grad_mask, options_.clip_norm, lr, nullptr, &rec->update);
      comm_s_ += sharded_->last_comm_seconds();
    } else {
      plain_->set_lr(lr);
      plain_->fused_step(options_.clip_norm, nullptr, &rec->update);
    }
    const StepResult u = read_records(1)[0];
    r.grad_norm = u.grad_norm;
    finite = u.applied();
  }
  module_.zero_grad();
  if (!finite) r.outcome = loss_finite ? StepOutcome::nonfinite_gradient : StepOutcome::nonfinite_loss;
  return r;
}

}  // namespace tarn
