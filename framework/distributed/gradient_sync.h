#pragma once
// Data-parallel gradient synchronisation: after every rank's backward over its share of the
// global batch, each parameter's gradient becomes the sum over ranks. The gradients are
// packed, in the fixed order of the parameter list, into one flat buffer on their device,
// reduced bucket by bucket (one collective per bucket of ~bucket_bytes instead of one per
// parameter), and unpacked. Once per optimizer step, after every micro-batch.
//
//   GradientSync sync(model.parameters(), comm);
//   std::vector<double> mask = sync.local_grad_mask();   // agreed with the step's control
//   comm.all_reduce_host(mask.data(), mask.size(), ReduceOp::max);
//   sync.all_reduce(mask);
//
// A parameter without a gradient on some rank (that rank's share had nothing that uses it)
// takes part with zeros; one without a gradient on every rank keeps none, as on one rank, so
// the optimizer skips it everywhere.
#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "kernels/collectives.h"

namespace tarn {

// dst <- param's gradient, or zeros when it has none on this rank: how a gradient enters a flat
// buffer that every rank reduces (here and in ZeRO-1's ShardedAdamW).
void pack_gradient(const Tensor& param, Tensor dst);

class GradientSync {
 public:
  static constexpr int64_t kDefaultBucketBytes = 32 << 20;

  // The parameters must outlive the sync; all on one device.
  GradientSync(std::vector<Tensor*> params, kernels::Communicator& comm, int64_t bucket_bytes = kDefaultBucketBytes);

  // 1 for each parameter that has a gradient on this rank, else 0.
  std::vector<double> local_grad_mask() const;
  // Sums the gradients over the ranks in place; `any_rank_has_grad` is the mask's maximum
  // over the ranks (the same on every rank).
  void all_reduce(const std::vector<double>& any_rank_has_grad);

  int64_t elements() const { return total_; }
  int64_t buckets() const { return static_cast<int64_t>(bucket_ends_.size()); }
  double last_comm_seconds() const { return last_comm_s_; }  // time inside the collectives

 private:
  std::vector<Tensor*> params_;
  kernels::Communicator& comm_;
  std::vector<int64_t> offsets_;      // of each parameter in the flat buffer
  std::vector<int64_t> bucket_ends_;  // element offsets, ascending; buckets break between parameters
  int64_t total_ = 0;
  Tensor flat_;
  double last_comm_s_ = 0;
};

}  // namespace tarn
