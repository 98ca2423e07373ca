#pragma once
// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models"): AdamW whose moments are split across the ranks. The parameters and
// their gradients live in a ParameterArena (framework/parameter_arena.h) padded to a multiple
// of the rank count, and a shard is a range of it: the arena's gradient buffer is
// reduce-scattered as it is (no packing), so rank r receives the summed gradient of elements
// [r*S, (r+1)*S). Each rank takes the global norm (its shard's sum of squares, summed across
// ranks), runs the AdamW arithmetic of kernels/optim.h with the clipping factor folded in on
// its range of the parameters (m and v exist for those elements alone), and the arena's values
// are all-gathered in place, which leaves every parameter updated. Optimizer memory per rank
// falls from 2 x P floats to 2 x P / ranks.
//
// The update is AdamW's elementwise arithmetic on the same summed gradients, so the parameters
// equal plain data-parallel AdamW's; only the gradient norm is summed in another order (in
// double), which can move the clip factor in its last bit.
//
// Checkpoints stay independent of the rank count: gather_state() assembles the full AdamWState
// (every parameter's m and v under its name), and load_state() takes a full one and keeps
// this rank's shard.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/adamw.h"
#include "framework/parameter_arena.h"
#include "framework/tensor.h"
#include "kernels/collectives.h"

namespace tarn {

class ShardedAdamW {
 public:
  // The parameters in model order (tied ones listed again are kept once, under the first
  // name, as AdamW does), all in `arena`, whose size is a multiple of the rank count. Both
  // must outlive the optimizer.
  ShardedAdamW(const ParameterArena& arena, const std::vector<std::pair<std::string, Tensor*>>& params,
               const AdamWOptions& options, kernels::Communicator& comm, DecayRule decays = decays_unless_bias_or_norm);
  // Parameters in no arena yet (all on one device): puts them in one of its own, packed tight
  // (no alignment gaps) and padded to the rank count.
  ShardedAdamW(const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options,
               kernels::Communicator& comm, DecayRule decays = decays_unless_bias_or_norm);

  // 1 for each parameter (in names() order) with a gradient on this rank.
  std::vector<double> local_grad_mask() const;
  // One step from the local gradients: reduce-scatter, global norm, clipping to clip_norm
  // (0 = none), AdamW on this rank's shard with learning rate lr, all-gather. `any_rank_has_grad`
  // is the mask's maximum over the ranks: parameters no rank has a gradient for are skipped, as
  // AdamW skips them. Returns the norm before clipping; when it is not finite nothing changes.
  double step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr);

  std::vector<std::string> names() const;
  int64_t step_count() const { return step_count_; }
  float lr() const { return options_.lr; }
  int64_t shard_elements() const { return shard_; }  // S: m and v hold this many floats each
  int64_t elements() const { return arena_.size(); }  // S x ranks
  // This rank's shard: elements [shard_begin(), shard_begin() + shard_elements()) of the arena.
  int64_t shard_begin() const { return shard_begin_; }
  double last_comm_seconds() const { return last_comm_s_; }

  // Collective: the full state on every rank (the moments as fresh tensors).
  AdamWState gather_state();
  // Checks names and shapes, then keeps this rank's shard of the moments.
  void load_state(const AdamWState& state);

 private:
  struct Slot {
    std::string name;
    Tensor* param;
    int64_t offset;  // in the arena
    int64_t step = 0;
    bool decay = true;
  };
  ShardedAdamW(std::unique_ptr<ParameterArena> owned, const std::vector<std::pair<std::string, Tensor*>>& params,
               const AdamWOptions& options, kernels::Communicator& comm, DecayRule decays);
  // This rank's part of slot s, as [begin, end) element offsets within the parameter (empty
  // when begin >= end).
  std::pair<int64_t, int64_t> local_range(const Slot& s) const;
  Tensor flat_view(const Tensor& t) const { return t.view(Shape{t.numel()}); }

  std::unique_ptr<ParameterArena> owned_;  // built from bare parameters
  const ParameterArena& arena_;
  AdamWOptions options_;
  kernels::Communicator& comm_;
  std::vector<Slot> slots_;
  std::vector<size_t> range_of_slot_;
  int64_t shard_ = 0, shard_begin_ = 0;
  Tensor grad_shard_, m_, v_;  // shard_ each
  int64_t step_count_ = 0;
  double last_comm_s_ = 0;
};

}  // namespace tarn
