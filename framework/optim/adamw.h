#pragma once
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), as torch.optim.AdamW:
// weight decay shrinks the parameter directly (p -= lr*wd*p) instead of entering the gradient,
// then the bias-corrected Adam update. The arithmetic is kernels/optim.h.
//
//   AdamW opt(model.named_parameters(), {.lr = 5e-4f, .weight_decay = 0.01f});
//   loss.backward(); clip_grad_norm(model.parameters(), 1.0f);
//   opt.set_lr(schedule.lr_at(opt.step_count())); opt.step(); opt.zero_grad();
//
// Which parameters decay is a DecayRule on the parameter's name; the default follows the
// HuggingFace Trainer (no decay for biases and LayerNorm weights).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "framework/optim/fused_adamw_table.h"
#include "framework/parameter_arena.h"
#include "framework/tensor.h"
#include "kernels/optim.h"

namespace tarn {

// True when the parameter `name` should receive weight decay.
using DecayRule = std::function<bool(const std::string& name)>;

// HF Trainer's rule, spelled for HF names: no decay for any name ending in "bias" (so also
// "final_logits_bias") or whose name contains "layer_norm", "layernorm" or "LayerNorm"
// (BART's "self_attn_layer_norm", "final_layer_norm", "layernorm_embedding"), "output_norm" or
// "A_log" (delta attention's per-head norm and decay rate, as Gated DeltaNet's code has it).
bool decays_unless_bias_or_norm(const std::string& name);
// No decay for names containing any of `patterns` (HF's older scripts: {"bias", "LayerNorm.weight"}).
DecayRule decay_unless_name_contains(std::vector<std::string> patterns);
// Every parameter decays.
bool decays_always(const std::string& name);

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // torch.optim.AdamW's default
};

// What a checkpoint keeps, per parameter name: the moments and how many updates that
// parameter has had (its bias-correction exponent; parameters that had no gradient on some
// steps lag behind step_count, as in PyTorch).
struct AdamWParamState {
  Tensor exp_avg;     // m, same shape as the parameter
  Tensor exp_avg_sq;  // v
  int64_t step = 0;
};
struct AdamWState {
  int64_t step_count = 0;  // calls to step()
  std::map<std::string, AdamWParamState> params;
};

// The kernel's hyper-parameters for one parameter's update number `step` (1-based).
kernels::cpu::AdamWHyper adamw_hyper(const AdamWOptions& options, bool decay, int64_t step);

// Throws unless `state` holds exactly these parameters (name, parameter), each with moments of
// its shape and a step count in [0, state.step_count]: what loading a checkpoint checks first.
void check_adamw_state(const AdamWState& state, const std::vector<std::pair<std::string, const Tensor*>>& params);
// The same for an optimizer's slots, each with a `name` and a `param`.
template <class Slot>
void check_adamw_state(const AdamWState& state, const std::vector<Slot>& slots) {
  std::vector<std::pair<std::string, const Tensor*>> params;
  for (const Slot& s : slots) params.emplace_back(s.name, s.param);
  check_adamw_state(state, params);
}

// Holds pointers to the parameters: the module that owns them must outlive the optimizer.
class AdamW {
 public:
  AdamW(const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options = {},
        DecayRule decays = decays_unless_bias_or_norm);

  // One update of every parameter that has a gradient; those without one are left alone. Each
  // gradient is read as gradient x grad_scale (f32): the clipping factor of clip_factor()
  // (framework/optim/clip_grad.h), applied inside the update's pass, with the bits that scaling
  // the gradients first would give.
  void step(float grad_scale = 1.0f);

  // The arena every parameter lives in (framework/parameter_arena.h; it must outlive the
  // optimizer), for fused_step(): the moments move into two buffers of the arena's layout
  // (each parameter's exp_avg and exp_avg_sq become views of its range, values kept), and the
  // ranges, each with its decay, become a table in the arena's memory.
  void use_arena(const ParameterArena& arena);
  // The whole clipped update in one kernel call over the arena (kernels/optim.h,
  // adamw_fused_step), nothing read back: the global gradient norm, clipping to max_norm (0:
  // none) folded in, and the update of every parameter with a gradient, with the bits of
  // global_grad_norm, clip_factor and step(factor). Skipped where it runs, leaving parameters,
  // moments and step counts untouched, when *skip is nonzero (arena memory; may be null) or the
  // norm is not finite; `outcome` (arena memory) receives the norm, the factor and whether it
  // applied. The step counts then live with the update: step_count(), state() and the rest
  // read them back first.
  void fused_step(float max_norm, const int32_t* skip, kernels::cpu::AdamWOutcome* outcome);
  // Drops every parameter's gradient.
  void zero_grad();

  void set_lr(float lr);
  float lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }
  int64_t step_count() const {
    pull_steps();
    return step_count_;
  }

  // Names in registration order, and whether each one decays (for logging the split). A tensor
  // listed under several names (tied weights) is one parameter, kept under its first name.
  std::vector<std::string> names() const;
  bool decays(const std::string& name) const;

  // Checkpoints: state() deep-copies; state_view() aliases the live moments (no copy: write it
  // out before the next step()); load_state() copies back, after checking that the names and
  // shapes are exactly this optimizer's. A restored optimizer's next steps are bit-identical.
  AdamWState state() const;
  AdamWState state_view() const;
  void load_state(const AdamWState& s);

 private:
  struct Slot {
    std::string name;
    Tensor* param;
    Tensor exp_avg, exp_avg_sq;
    mutable int64_t step = 0;  // mutable: pull_steps() brings fused_step's counts back
    bool decay = true;
  };
  const Slot& slot(const std::string& name) const;

  // Where the step counts are newest: here, or with fused_step (its table in arena memory).
  enum class Counts { here, on_device };
  void pull_steps() const;  // reads fused_step's counts back when they are newer
  void push_steps();        // writes these counts to fused_step's table when it has one

  AdamWOptions options_;
  std::vector<Slot> slots_;
  mutable int64_t step_count_ = 0;
  mutable Counts counts_ = Counts::here;

  // fused_step()'s state (use_arena): the moments in the arena's layout, and the kernels'
  // table and counts in arena memory, a range per slot in slot order.
  const ParameterArena* arena_ = nullptr;
  Tensor m_, v_;
  FusedAdamWTable table_;
  std::vector<size_t> range_of_slot_;  // the arena's range of each slot
};

}  // namespace tarn
