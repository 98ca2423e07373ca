#include "framework/distributed/sharded_adamw.h"

#include <chrono>
#include <cmath>
#include <map>

#include "framework/backend.h"
#include "kernels/optim.h"

namespace tarn {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

namespace {
std::vector<Tensor*> tensors_of(const std::vector<std::pair<std::string, Tensor*>>& named) {
  std::vector<Tensor*> out;
  for (const auto& [name, p] : named) out.push_back(p);
  return out;
}
}  // namespace

ShardedAdamW::ShardedAdamW(const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options,
                           kernels::Communicator& comm, DecayRule decays)
    : ShardedAdamW(std::make_unique<ParameterArena>(tensors_of(params),
                                                    params.empty() ? Device::cpu() : params.front().second->device(),
                                                    /*align=*/1, /*pad_to=*/comm.world()),
                   params, options, comm, std::move(decays)) {}

ShardedAdamW::ShardedAdamW(std::unique_ptr<ParameterArena> owned,
                           const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options,
                           kernels::Communicator& comm, DecayRule decays)
    : ShardedAdamW(*owned, params, options, comm, std::move(decays)) {
  owned_ = std::move(owned);
}

ShardedAdamW::ShardedAdamW(const ParameterArena& arena, const std::vector<std::pair<std::string, Tensor*>>& params,
                           const AdamWOptions& options, kernels::Communicator& comm, DecayRule decays)
    : arena_(arena), options_(options), comm_(comm) {
  TARN_ASSERT(!params.empty(), "ShardedAdamW: no parameters");
  const int64_t world = comm_.world();
  TARN_ASSERT(arena_.size() % world == 0, "ShardedAdamW: the arena's ", arena_.size(),
              " elements do not split into ", world, " shards (flatten with pad_to = the rank count)");
  std::vector<bool> taken(arena_.ranges().size(), false);
  for (const auto& [name, p] : params) {
    TARN_ASSERT(p && p->defined() && p->dtype() == DType::f32, "ShardedAdamW: parameter ", name, " must be f32");
    const int64_t r = arena_.range_of(*p);
    TARN_ASSERT(r >= 0, "ShardedAdamW: parameter ", name, " is not in the arena");
    if (taken[static_cast<size_t>(r)]) continue;  // tied: updated once
    taken[static_cast<size_t>(r)] = true;
    slots_.push_back({name, p, arena_.ranges()[static_cast<size_t>(r)].offset, 0, decays(name)});
    range_of_slot_.push_back(static_cast<size_t>(r));
  }
  shard_ = arena_.size() / world;
  shard_begin_ = shard_ * comm_.rank();
  const Device device = arena_.device();
  grad_shard_ = Tensor::zeros(Shape{shard_}, device);
  m_ = Tensor::zeros(Shape{shard_}, device);
  v_ = Tensor::zeros(Shape{shard_}, device);
  // The fused update's table: each slot's part of this shard, in shard coordinates (the
  // parameters' pointer is moved to the shard's start, so one offset serves all four buffers).
  std::vector<kernels::cpu::AdamWRange> ranges;
  for (const Slot& slot : slots_) {
    kernels::cpu::AdamWRange r;
    const auto [begin, end] = local_range(slot);
    if (begin < end) {
      r.offset = slot.offset + begin - shard_begin_;
      r.numel = end - begin;
    }
    r.weight_decay = slot.decay ? options_.weight_decay : 0.0f;
    ranges.push_back(r);
  }
  table_ = FusedAdamWTable(std::move(ranges), device);
  sums_ = storage_bytes(static_cast<size_t>(world) * sizeof(double), device);
  outcome_ = storage_bytes(sizeof(kernels::cpu::AdamWOutcome), device);
  push_steps();
}

std::pair<int64_t, int64_t> ShardedAdamW::local_range(const Slot& s) const {
  const int64_t begin = std::max(s.offset, shard_begin_), end = std::min(s.offset + s.param->numel(), shard_begin_ + shard_);
  return {begin - s.offset, end - s.offset};
}

std::vector<double> ShardedAdamW::local_grad_mask() const {
  std::vector<double> mask(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) mask[i] = slots_[i].param->grad().defined() ? 1.0 : 0.0;
  return mask;
}

std::vector<std::string> ShardedAdamW::names() const {
  std::vector<std::string> out;
  for (const Slot& s : slots_) out.push_back(s.name);
  return out;
}

void ShardedAdamW::step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr, const int32_t* skip,
                        kernels::cpu::AdamWOutcome* outcome) {
  TARN_ASSERT(any_rank_has_grad.size() == slots_.size(), "ShardedAdamW: a mask of ", any_rank_has_grad.size(),
              " values for ", slots_.size(), " parameters");
  TARN_CHECK(std::isfinite(lr) && lr >= 0.0f, "ShardedAdamW: lr must be a finite number >= 0, got ", lr);
  const Device dev = arena_.device();
  const kernels::Backend& k = backend_for(dev);
  for (size_t r : range_of_slot_) arena_.settle_grad(r);  // zeros where this rank has no gradient
  // Which parameters any rank has a gradient for is the host's to know; the table goes to the
  // device when that changes (once, in a run whose every parameter has one every step).
  for (size_t i = 0; i < slots_.size(); ++i) table_.set_has_grad(i, any_rank_has_grad[i] != 0.0);
  table_.upload();
  auto start = Clock::now();
  comm_.start_reduce_scatter_sum(arena_.grads().device_f32(), grad_shard_.device_f32(), shard_)->wait();
  // This shard's sum of squares (as sum_squares over the shard: padding and gaps are zeros),
  // then every rank's, in place: rank r's double is floats [2r, 2r + 2) of sums_.
  auto* sums = reinterpret_cast<double*>(sums_.device_f32());
  k.sum_squares_into(grad_shard_.device_f32(), shard_, sums + comm_.rank());
  constexpr int64_t kFloatsPerDouble = sizeof(double) / sizeof(float);
  comm_.start_all_gather(reinterpret_cast<const float*>(sums + comm_.rank()), sums_.device_f32(), kFloatsPerDouble)
      ->wait();
  last_comm_s_ = since(start);

  options_.lr = lr;
  // The shard's parameters start at shard_begin_ of the arena; the ranges' offsets are the shard's.
  k.adamw_fused_update(arena_.values().device_f32() + shard_begin_, grad_shard_.device_f32(), m_.device_f32(),
                       v_.device_f32(), table_.ranges(), table_.states(), table_.size(), table_.blocks(),
                       fused_hyper(options_, lr, clip_norm), sums, comm_.world(), skip, table_.applied_steps(),
                       outcome);
  counts_on_device_ = true;
  // Every rank's range (updated or not) to every rank, into the arena the parameters are views of.
  start = Clock::now();
  const Tensor mine = arena_.values().narrow0(shard_begin_, shard_begin_ + shard_);
  comm_.start_all_gather(mine.device_f32(), arena_.values().device_f32(), shard_)->wait();
  last_comm_s_ += since(start);
}

double ShardedAdamW::step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr) {
  auto* outcome = reinterpret_cast<kernels::cpu::AdamWOutcome*>(outcome_.device_f32());
  step(any_rank_has_grad, clip_norm, lr, nullptr, outcome);
  kernels::cpu::AdamWOutcome host;
  const Device dev = arena_.device();
  backend_for(dev).copy_device_to_host(&host, outcome, sizeof host, dev.index);
  return host.norm;
}

int64_t ShardedAdamW::step_count() const {
  pull_steps();
  return step_count_;
}

void ShardedAdamW::pull_steps() const {
  if (!counts_on_device_) return;
  std::vector<int64_t> steps;
  step_count_ = table_.read_counts(steps);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].step = steps[i];
  counts_on_device_ = false;
}

void ShardedAdamW::push_steps() {
  std::vector<int64_t> steps;
  for (const Slot& s : slots_) steps.push_back(s.step);
  table_.write_counts(step_count_, steps);
  counts_on_device_ = false;
}

AdamWState ShardedAdamW::gather_state() {
  pull_steps();
  const Device device = arena_.device();
  Tensor full_m = Tensor::zeros(Shape{arena_.size()}, device), full_v = Tensor::zeros(Shape{arena_.size()}, device);
  comm_.all_gather(m_.device_f32(), full_m.device_f32(), shard_);
  comm_.all_gather(v_.device_f32(), full_v.device_f32(), shard_);
  AdamWState out;
  out.step_count = step_count_;
  for (const Slot& s : slots_) {
    const int64_t n = s.param->numel();
    out.params[s.name] = {full_m.narrow0(s.offset, s.offset + n).view(s.param->shape()).clone(),
                          full_v.narrow0(s.offset, s.offset + n).view(s.param->shape()).clone(), s.step};
  }
  return out;
}

void ShardedAdamW::load_state(const AdamWState& st) {
  check_adamw_state(st, slots_);
  for (Slot& s : slots_) {
    const AdamWParamState& p = st.params.at(s.name);
    s.step = p.step;
    const auto [begin, end] = local_range(s);
    if (begin >= end) continue;
    const int64_t at = s.offset + begin - shard_begin_;
    m_.narrow0(at, at + end - begin).copy_from(flat_view(p.exp_avg).narrow0(begin, end));
    v_.narrow0(at, at + end - begin).copy_from(flat_view(p.exp_avg_sq).narrow0(begin, end));
  }
  step_count_ = st.step_count;
  push_steps();
}

}  // namespace tarn
