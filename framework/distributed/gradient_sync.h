#pragma once
// Data-parallel gradient synchronisation: after every rank's backward over its share of the
// global batch, each parameter's gradient becomes the sum over ranks. The gradients are packed
// into one flat buffer on their device, reduced bucket by bucket (one collective per bucket of
// ~bucket_bytes instead of one per parameter), and unpacked. Once per optimizer step, after
// every micro-batch.
//
// Overlap: observed during the step's last backward (ObserveBackward, framework/autograd.h), a
// GradientSync packs each gradient the moment it is final and starts a bucket's all-reduce
// (Communicator::start_all_reduce_sum) as soon as all of its gradients are in, while the
// backward goes on with the layers below. The buffer holds the parameters in reverse order, so
// the buckets fill in the order the backward produces gradients (last layers first).
//
//   GradientSync sync(model.parameters(), comm);
//   for each micro-batch but the last: loss.backward(...);
//   { ObserveBackward observe(sync); last_loss.backward(...); }    // buckets start early
//   sync.start_remaining();              // every rank, even one whose share was empty
//   std::vector<double> mask = sync.local_grad_mask();   // agreed with the step's control
//   comm.all_reduce_host(mask.data(), mask.size(), ReduceOp::max);
//   sync.finish(mask);                   // waits, then unpacks
//
// Every rank starts the same buckets in the same order (bucket k only after bucket k - 1), so
// the collectives match whatever order each rank's backward finished its parameters in; the
// sums are elementwise, so the result has the same bits with or without overlap.
//
// A parameter without a gradient on some rank (that rank's share had nothing that uses it)
// takes part with zeros; one without a gradient on every rank keeps none, as on one rank, so
// the optimizer skips it everywhere.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "framework/autograd.h"
#include "framework/tensor.h"
#include "kernels/collectives.h"

namespace tarn {

// dst <- param's gradient, or zeros when it has none on this rank: how a gradient enters a flat
// buffer that every rank reduces (here and in ZeRO-1's ShardedAdamW).
void pack_gradient(const Tensor& param, Tensor dst);

class GradientSync final : public BackwardObserver {
 public:
  static constexpr int64_t kDefaultBucketBytes = 32 << 20;

  // The parameters must outlive the sync; all on one device.
  GradientSync(std::vector<Tensor*> params, kernels::Communicator& comm, int64_t bucket_bytes = kDefaultBucketBytes);

  // Packs the gradients the observed backward has not made final (zeros for those this rank has
  // none of) and starts every bucket not started yet. Every rank, every optimizer step.
  void start_remaining();
  // 1 for each parameter that has a gradient on this rank, else 0.
  std::vector<double> local_grad_mask() const;
  // Waits for the buckets and sets each gradient to its sum over the ranks; `any_rank_has_grad`
  // is the mask's maximum over the ranks (the same on every rank). Starts what start_remaining
  // would have, when it was not called.
  void finish(const std::vector<double>& any_rank_has_grad);

  // BackwardObserver: a parameter's gradient is final, a node has run.
  void leaf_ready(const AutogradMeta& leaf) override;
  void node_done() override;

  int64_t elements() const { return total_; }
  int64_t buckets() const { return static_cast<int64_t>(bucket_ends_.size()); }
  // Of the last step: time inside the collectives' calls on this thread (starting, moving on,
  // waiting): the communication the computation did not hide. Buckets started before finish().
  double last_comm_seconds() const { return last_comm_s_; }
  int64_t last_buckets_started_early() const { return last_started_early_; }

 private:
  void pack(size_t i);
  void start_ready_buckets();
  void reset_step();

  std::vector<Tensor*> params_;
  kernels::Communicator& comm_;
  std::unordered_map<const AutogradMeta*, std::vector<size_t>> by_meta_;  // tied parameters share one
  std::vector<int64_t> offsets_;      // of each parameter in the flat buffer (reverse order)
  std::vector<size_t> bucket_of_;     // of each parameter
  std::vector<int64_t> bucket_ends_;  // element offsets, ascending; buckets break between parameters
  std::vector<int64_t> bucket_size_;  // parameters per bucket
  int64_t total_ = 0;
  Tensor flat_;
  // This step's state.
  std::vector<bool> packed_;
  std::vector<int64_t> bucket_packed_;
  std::vector<std::unique_ptr<kernels::PendingCollective>> pending_;  // one per started bucket
  size_t first_incomplete_ = 0;
  int64_t started_early_ = 0, last_started_early_ = 0;
  double comm_s_ = 0, last_comm_s_ = 0;
};

}  // namespace tarn
