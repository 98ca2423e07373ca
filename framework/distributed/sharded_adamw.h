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
// Nothing is read back (issue 51): the shard's sum of squares stays on the device
// (sum_squares_into), every rank's sum is all-gathered there (a double as two floats: the
// all-gather moves bits, it adds nothing) and adamw_fused_update adds them in rank order (the
// bits all_reduce_host gave) and updates every parameter's part of the shard in one launch over
// a table of ranges, skipping itself where a flag says the loss was bad or the norm is not
// finite. The update counts then live on the device, read back when a checkpoint or
// step_count() asks, as AdamW::fused_step's.
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
#include "framework/optim/fused_adamw_table.h"
#include "framework/parameter_arena.h"
#include "framework/tensor.h"
#include "kernels/collectives.h"
#include "kernels/optim.h"

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
  // AdamW skips them. Nothing is read back: `outcome` (the arena's memory) receives the norm
  // before clipping, the factor and whether the update applied; it is skipped (nothing
  // changes) when *skip is nonzero (the arena's memory; may be null), when the norm is not
  // finite, or when clipping and it is not finite in f32 (adamw_fused_step's rule). Every rank
  // makes the same collectives whatever the outcome.
  void step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr, const int32_t* skip,
            kernels::cpu::AdamWOutcome* outcome);
  // The same, its outcome read back (one copy): the norm before clipping.
  double step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr);

  std::vector<std::string> names() const;
  int64_t step_count() const;
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
    mutable int64_t step = 0;  // mutable: pull_steps() brings the device's counts back
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
  mutable int64_t step_count_ = 0;
  double last_comm_s_ = 0;

  // The fused update's state (kernels/optim.h): the table, a range per slot in shard
  // coordinates (the part of the parameter this shard holds; empty ones count steps and update
  // nothing), with the counts; and in the arena's memory every rank's sum of squares and an
  // outcome for the step that reads back.
  FusedAdamWTable table_;
  Tensor sums_, outcome_;  // f32 tensors used as storage
  mutable bool counts_on_device_ = false;  // the device's counts are newer than the slots'
  void pull_steps() const;
  void push_steps();
};

}  // namespace tarn
