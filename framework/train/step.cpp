#include "framework/train/step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/optim/clip_grad.h"

namespace tarn {

const char* step_outcome_name(StepOutcome outcome) {
  static const char* const kNames[] = {"applied", "non-finite or diverged loss", "non-finite gradient norm"};
  return kNames[static_cast<int>(outcome)];
}

TrainStep::TrainStep(Module& module, kernels::Communicator& control, kernels::Communicator& gradients,
                     const TrainStepOptions& options)
    : module_(module), control_(control), options_(options) {
  const bool shard = options_.shard_optimizer && !solo();
  // The parameters and gradients live in one arena (framework/parameter_arena.h): buckets and
  // ZeRO-1 shards are ranges of it. ZeRO-1 splits it into a shard per rank.
  const ParameterArena& arena = module_.flatten_parameters(shard ? gradients.world() : 1);
  if (shard) {
    sharded_ = std::make_unique<ShardedAdamW>(arena, module_.named_parameters(), options_.adamw, gradients);
  } else {
    plain_ = std::make_unique<AdamW>(module_.named_parameters(), options_.adamw);
    sync_ = std::make_unique<GradientSync>(arena, module_.parameters(), gradients,
                                           std::max<int64_t>(4, options_.bucket_bytes));
  }
}

int64_t TrainStep::reduced_elements() const { return sharded_ ? sharded_->elements() : sync_->elements(); }

StepResult TrainStep::run(int64_t count, int64_t global_counted,
                          const std::function<std::optional<MicroBatchLoss>(int64_t)>& forward, float lr) {
  StepResult r;
  bool finite = true;
  const bool overlap = sync_ && !solo() && options_.overlap_communication;
  for (int64_t k = 0; k < count; ++k) {
    const std::optional<MicroBatchLoss> m = forward(k);
    if (!m) continue;  // this rank's share of a small global batch was empty
    const double l = m->loss.item();
    if (!std::isfinite(l)) {
      finite = false;
      break;
    }
    // Each micro-batch's mean weighted by its share of the step's tokens over all ranks (a
    // mean of per-rank means is not the mean when the shares differ in length).
    const Tensor weight = Tensor::full(Shape{}, static_cast<float>(m->counted) / static_cast<float>(global_counted),
                                       m->loss.device());
    std::optional<ObserveBackward> observe;
    if (overlap && k + 1 == count) observe.emplace(*sync_);
    m->loss.backward(weight);
    r.loss_sum += l * static_cast<double>(m->counted);
    r.nll_sum += m->nll;
    r.tokens += m->tokens;
  }

  std::vector<double> grad_mask;  // several ranks: which parameters any rank has a gradient for
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
  if (finite && sharded_) {  // reduce-scatter, clip, update the shard, all-gather: one call
    r.grad_norm = sharded_->step(grad_mask, options_.clip_norm, lr);
    comm_s_ += sharded_->last_comm_seconds();
    finite = std::isfinite(r.grad_norm);
  }
  // Clipping and AdamW make one pass over the gradients after the norm's: the norm must be
  // complete before any update, and the update reads each gradient scaled by the clipping
  // factor instead of a pass that scales them in place first (the same bits).
  float grad_scale = 1.0f;
  if (finite && !sharded_) {
    const double norm = global_grad_norm(module_.parameters());
    // As clip_grad_norm() reports it: rounded to f32 when clipping.
    r.grad_norm = options_.clip_norm > 0 ? static_cast<double>(static_cast<float>(norm)) : norm;
    grad_scale = clip_factor(norm, options_.clip_norm);
    finite = std::isfinite(r.grad_norm);
  }
  if (!finite) {
    module_.zero_grad();
    r.outcome = loss_finite ? StepOutcome::nonfinite_gradient : StepOutcome::nonfinite_loss;
    return r;
  }
  if (plain_) {
    plain_->set_lr(lr);
    plain_->step(grad_scale);
  }
  module_.zero_grad();
  return r;
}

}  // namespace tarn
