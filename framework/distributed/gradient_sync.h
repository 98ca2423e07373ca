#pragma once
// Data-parallel gradient synchronisation: after every rank's backward over its share of the
// global batch, each parameter's gradient becomes the sum over ranks. The gradients live in a
// ParameterArena (framework/parameter_arena.h), so a bucket is a slice of its gradient buffer:
// one collective per bucket of ~bucket_bytes instead of one per parameter, reduced in place,
// with no copy into a bucket buffer and none back. Once per optimizer step, after every
// micro-batch.
//
// Overlap: observed during the step's last backward (ObserveBackward, framework/autograd.h), a
// GradientSync notes each gradient the moment it is final and starts a bucket's all-reduce
// (Communicator::start_all_reduce_sum) as soon as all of its gradients are in, while the
// backward goes on with the layers below. Buckets are cut from the parameters listed last to
// those listed first (a tied parameter counts where it is listed last), so they fill in the
// order the backward produces gradients (last layers first); a bucket spans adjacent ranges of
// the arena only.
//
//   GradientSync sync(model.flatten_parameters(), model.parameters(), comm);
//   for each micro-batch but the last: loss.backward(...);
//   { ObserveBackward observe(sync); last_loss.backward(...); }    // buckets start early
//   sync.start_remaining();              // every rank, even one whose share was empty
//   std::vector<double> mask = sync.local_grad_mask();   // agreed with the step's control
//   comm.all_reduce_host(mask.data(), mask.size(), ReduceOp::max);
//   sync.finish(mask);                   // waits; the sums are already where the gradients live
//
// Every rank starts the same buckets in the same order (bucket k only after bucket k - 1), so
// the collectives match whatever order each rank's backward finished its parameters in; the
// sums are elementwise, so the result has the same bits with or without overlap, and for any
// layout of the buffer.
//
// A parameter without a gradient on some rank (that rank's share had nothing that uses it)
// takes part with zeros; one without a gradient on every rank keeps none, as on one rank, so
// the optimizer skips it everywhere.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "framework/autograd.h"
#include "framework/parameter_arena.h"
#include "framework/tensor.h"
#include "kernels/collectives.h"

namespace tarn {

class GradientSync final : public BackwardObserver {
 public:
  static constexpr int64_t kDefaultBucketBytes = 32 << 20;

  // `params` (tied ones may be listed twice) all live in `arena`; both must outlive the sync.
  GradientSync(const ParameterArena& arena, std::vector<Tensor*> params, kernels::Communicator& comm,
               int64_t bucket_bytes = kDefaultBucketBytes);
  // Parameters in no arena yet (all on one device): puts them in one of its own.
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

  int64_t elements() const { return arena_.size(); }  // the arena's gradients, padding included
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Bucket b is elements [bucket_begin(b), bucket_end(b)) of the arena's gradients.
  int64_t bucket_begin(size_t b) const { return buckets_.at(b).begin; }
  int64_t bucket_end(size_t b) const { return buckets_.at(b).end; }
  // Of the last step: time inside the collectives' calls on this thread (starting, moving on,
  // waiting): the communication the computation did not hide. Buckets started before finish().
  double last_comm_seconds() const { return last_comm_s_; }
  int64_t last_buckets_started_early() const { return last_started_early_; }

 private:
  GradientSync(std::unique_ptr<ParameterArena> owned, std::vector<Tensor*> params, kernels::Communicator& comm,
               int64_t bucket_bytes);
  void pack(size_t r);
  void start_ready_buckets();
  void reset_step();

  std::unique_ptr<ParameterArena> owned_;  // built from bare parameters
  const ParameterArena& arena_;
  std::vector<Tensor*> params_;
  kernels::Communicator& comm_;
  std::vector<size_t> range_of_;  // of each parameter: its range of the arena
  std::unordered_map<const AutogradMeta*, size_t> range_by_meta_;
  struct Bucket {
    int64_t begin = 0, end = 0;  // elements of the arena's gradients
    int64_t ranges = 0;          // how many ranges it spans
  };
  std::vector<size_t> order_;       // the ranges of params_, in the order buckets take them
  std::vector<size_t> bucket_of_;   // of each range
  std::vector<Bucket> buckets_;
  // This step's state.
  std::vector<bool> packed_;  // of each range
  std::vector<int64_t> bucket_packed_;
  std::vector<std::unique_ptr<kernels::PendingCollective>> pending_;  // one per started bucket
  size_t first_incomplete_ = 0;
  int64_t started_early_ = 0, last_started_early_ = 0;
  double comm_s_ = 0, last_comm_s_ = 0;
};

}  // namespace tarn
