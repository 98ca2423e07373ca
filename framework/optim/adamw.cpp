#include "framework/optim/adamw.h"

#include <cmath>
#include <map>
#include <set>

#include "framework/backend.h"
#include "kernels/optim.h"

namespace tarn {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_options(const AdamWOptions& o) {
  TARN_CHECK(std::isfinite(o.lr) && o.lr >= 0.0f, "AdamW: lr must be a finite number >= 0, got ", o.lr);
  TARN_CHECK(o.beta1 >= 0.0f && o.beta1 < 1.0f, "AdamW: beta1 must be in [0, 1), got ", o.beta1);
  TARN_CHECK(o.beta2 >= 0.0f && o.beta2 < 1.0f, "AdamW: beta2 must be in [0, 1), got ", o.beta2);
  TARN_CHECK(o.eps > 0.0f, "AdamW: eps must be > 0, got ", o.eps);
  TARN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0f, "AdamW: weight_decay must be >= 0, got ",
             o.weight_decay);
}

}  // namespace

bool decays_unless_bias_or_norm(const std::string& name) {
  if (ends_with(name, "bias")) return false;
  for (const char* norm : {"layer_norm", "layernorm", "LayerNorm", "output_norm", "A_log"})
    if (name.find(norm) != std::string::npos) return false;
  return true;
}

DecayRule decay_unless_name_contains(std::vector<std::string> patterns) {
  return [patterns = std::move(patterns)](const std::string& name) {
    for (const auto& p : patterns)
      if (name.find(p) != std::string::npos) return false;
    return true;
  };
}

bool decays_always(const std::string&) { return true; }

AdamW::AdamW(const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options,
             DecayRule decays)
    : options_(options) {
  check_options(options_);
  TARN_ASSERT(decays, "AdamW: the decay rule is empty");
  std::set<std::string> seen;
  std::map<const float*, std::string> owners;  // data pointer -> first name that holds it
  for (const auto& [name, p] : params) {
    TARN_ASSERT(p && p->defined(), "AdamW: parameter ", name, " is undefined");
    TARN_ASSERT(seen.insert(name).second, "AdamW: parameter name ", name, " appears twice");
    TARN_ASSERT(p->dtype() == DType::f32, "AdamW: parameter ", name, " must be f32, got ", dtype_name(p->dtype()),
                " on ", p->device().str());
    // A tied weight listed under two names is one parameter, updated once (as PyTorch's
    // named_parameters() drops duplicates); it keeps the first name.
    const auto [owner, fresh] = owners.try_emplace(p->device_f32(), name);
    if (!fresh) {
      const Slot& first = slot(owner->second);
      TARN_ASSERT(first.param->shape() == p->shape(), "AdamW: parameters ", first.name, " ",
                  first.param->shape().str(), " and ", name, " ", p->shape().str(), " share storage with different shapes");
      continue;
    }
    slots_.push_back({name, p, Tensor::zeros(p->shape(), p->device()), Tensor::zeros(p->shape(), p->device()), 0,
                      decays(name)});
  }
}

void AdamW::step(float grad_scale) {
  pull_steps();
  // Every gradient is checked before any parameter moves, so a bad one leaves the model as it was.
  for (const Slot& s : slots_) {
    const Tensor g = s.param->grad();
    if (!g.defined()) continue;
    check_same_shape("AdamW gradient", *s.param, g);
    TARN_ASSERT(g.dtype() == DType::f32 && g.device() == s.param->device(), "AdamW: gradient of ", s.name,
                " must be f32 on ", s.param->device().str(), " (the parameter's device), got ", dtype_name(g.dtype()),
                " on ", g.device().str());
    TARN_ASSERT(s.exp_avg.device() == s.param->device(), "AdamW: the moments of ", s.name, " are on ",
                s.exp_avg.device().str(), " but the parameter is on ", s.param->device().str(),
                " (move the model before building the optimizer)");
  }
  ++step_count_;
  for (Slot& s : slots_) {
    const Tensor g = s.param->grad();
    if (!g.defined()) continue;
    ++s.step;
    kernels::cpu::AdamWHyper h = adamw_hyper(options_, s.decay, s.step);
    h.grad_scale = grad_scale;
    backend_for(g.device())
        .adamw_step(s.param->device_f32(), g.device_f32(), s.exp_avg.device_f32(), s.exp_avg_sq.device_f32(),
                    s.param->numel(), h);
  }
  push_steps();
}

void AdamW::use_arena(const ParameterArena& arena) {
  pull_steps();
  const Device dev = arena.device();
  Tensor m = Tensor::zeros(Shape{arena.size()}, dev), v = Tensor::zeros(Shape{arena.size()}, dev);
  std::vector<kernels::cpu::AdamWRange> ranges;
  std::vector<size_t> range_of_slot;
  for (Slot& s : slots_) {
    const int64_t r = arena.range_of(*s.param);
    TARN_ASSERT(r >= 0, "AdamW::use_arena: parameter ", s.name, " is not in the arena");
    const ParameterArena::Range& range = arena.ranges()[static_cast<size_t>(r)];
    Tensor m_view = m.narrow0(range.offset, range.end()).view(s.param->shape());
    Tensor v_view = v.narrow0(range.offset, range.end()).view(s.param->shape());
    m_view.copy_from(s.exp_avg);
    v_view.copy_from(s.exp_avg_sq);
    s.exp_avg = m_view;
    s.exp_avg_sq = v_view;
    kernels::cpu::AdamWRange k;
    k.offset = range.offset;
    k.numel = range.numel;
    k.weight_decay = s.decay ? options_.weight_decay : 0.0f;
    ranges.push_back(k);
    range_of_slot.push_back(static_cast<size_t>(r));
  }
  arena_ = &arena;
  m_ = m;
  v_ = v;
  table_ = FusedAdamWTable(std::move(ranges), dev);
  range_of_slot_ = std::move(range_of_slot);
  push_steps();
}

void AdamW::fused_step(float max_norm, const int32_t* skip, kernels::cpu::AdamWOutcome* outcome) {
  TARN_ASSERT(arena_, "AdamW::fused_step: use_arena() first");
  const Device dev = arena_->device();
  const kernels::Backend& k = backend_for(dev);
  // Which parameters have a gradient is the host's to know (autograd's); a gradient set
  // elsewhere (Tensor::set_grad) is copied into its range first. The table goes to the device
  // only when that changes: once, in a run whose every parameter has a gradient every step.
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Tensor g = slots_[i].param->grad();
    if (g.defined()) arena_->settle_grad(range_of_slot_[i]);
    table_.set_has_grad(i, g.defined());
  }
  table_.upload();
  k.adamw_fused_step(arena_->values().device_f32(), arena_->grads().device_f32(), m_.device_f32(), v_.device_f32(),
                     table_.ranges(), table_.states(), table_.size(), table_.blocks(),
                     fused_hyper(options_, options_.lr, max_norm), skip, table_.applied_steps(), outcome);
  counts_ = Counts::on_device;
}

void AdamW::pull_steps() const {
  if (counts_ != Counts::on_device) return;
  std::vector<int64_t> steps;
  step_count_ = table_.read_counts(steps);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].step = steps[i];
  counts_ = Counts::here;
}

void AdamW::push_steps() {
  if (!arena_) return;
  std::vector<int64_t> steps;
  for (const Slot& s : slots_) steps.push_back(s.step);
  table_.write_counts(step_count_, steps);
  counts_ = Counts::here;
}

void AdamW::zero_grad() {
  for (Slot& s : slots_) s.param->zero_grad();
}

void AdamW::set_lr(float lr) {
  TARN_CHECK(std::isfinite(lr) && lr >= 0.0f, "AdamW: lr must be a finite number >= 0, got ", lr);
  options_.lr = lr;
}

std::vector<std::string> AdamW::names() const {
  std::vector<std::string> out;
  for (const Slot& s : slots_) out.push_back(s.name);
  return out;
}

const AdamW::Slot& AdamW::slot(const std::string& name) const {
  for (const Slot& s : slots_)
    if (s.name == name) return s;
  throw Error(str_cat("AdamW: no parameter named ", name));
}

bool AdamW::decays(const std::string& name) const { return slot(name).decay; }

AdamWState AdamW::state() const {
  pull_steps();
  AdamWState out;
  out.step_count = step_count_;
  for (const Slot& s : slots_) out.params[s.name] = {s.exp_avg.clone(), s.exp_avg_sq.clone(), s.step};
  return out;
}

AdamWState AdamW::state_view() const {
  pull_steps();
  AdamWState out;
  out.step_count = step_count_;
  for (const Slot& s : slots_) out.params[s.name] = {s.exp_avg, s.exp_avg_sq, s.step};
  return out;
}

kernels::cpu::AdamWHyper adamw_hyper(const AdamWOptions& options, bool decay, int64_t step) {
  kernels::cpu::AdamWHyper h;
  h.lr = options.lr;
  h.beta1 = options.beta1;
  h.beta2 = options.beta2;
  h.eps = options.eps;
  h.weight_decay = decay ? options.weight_decay : 0.0f;
  h.step = step;
  return h;
}

void check_adamw_state(const AdamWState& st, const std::vector<std::pair<std::string, const Tensor*>>& params) {
  TARN_CHECK(st.step_count >= 0, "AdamW state: step_count must be >= 0, got ", st.step_count);
  TARN_CHECK(st.params.size() == params.size(), "AdamW state: holds ", st.params.size(),
             " parameters, the optimizer has ", params.size());
  for (const auto& [name, param] : params) {
    const auto it = st.params.find(name);
    TARN_CHECK(it != st.params.end(), "AdamW state: no entry for parameter ", name);
    const AdamWParamState& p = it->second;
    TARN_CHECK(p.exp_avg.defined() && p.exp_avg.shape() == param->shape(), "AdamW state: ", name,
               ".exp_avg has shape ", p.exp_avg.defined() ? p.exp_avg.shape().str() : "(undefined)",
               ", the parameter ", param->shape().str());
    TARN_CHECK(p.exp_avg_sq.defined() && p.exp_avg_sq.shape() == param->shape(), "AdamW state: ", name,
               ".exp_avg_sq has shape ", p.exp_avg_sq.defined() ? p.exp_avg_sq.shape().str() : "(undefined)",
               ", the parameter ", param->shape().str());
    TARN_CHECK(p.step >= 0 && p.step <= st.step_count, "AdamW state: ", name, ".step = ", p.step,
               " is outside [0, step_count = ", st.step_count, "]");
  }
}

void AdamW::load_state(const AdamWState& st) {
  check_adamw_state(st, slots_);  // everything before changing anything: a bad checkpoint leaves it intact
  for (Slot& s : slots_) {
    const AdamWParamState& p = st.params.at(s.name);
    s.exp_avg.copy_from(p.exp_avg);
    s.exp_avg_sq.copy_from(p.exp_avg_sq);
    s.step = p.step;
  }
  step_count_ = st.step_count;
  push_steps();
}

}  // namespace tarn
