#include "framework/distributed/sharded_adamw.h"

#include <chrono>
#include <cmath>
#include <map>

#include "framework/backend.h"
#include "framework/optim/clip_grad.h"
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

double ShardedAdamW::step(const std::vector<double>& any_rank_has_grad, float clip_norm, float lr) {
  TARN_ASSERT(any_rank_has_grad.size() == slots_.size(), "ShardedAdamW: a mask of ", any_rank_has_grad.size(),
              " values for ", slots_.size(), " parameters");
  const kernels::Backend& k = backend_for(arena_.device());
  for (size_t r : range_of_slot_) arena_.settle_grad(r);  // zeros where this rank has no gradient
  auto start = Clock::now();
  comm_.reduce_scatter_sum(arena_.grads().device_f32(), grad_shard_.device_f32(), shard_);
  last_comm_s_ = since(start);

  double sum = k.sum_squares(grad_shard_.device_f32(), shard_);
  comm_.all_reduce_host(&sum, 1, kernels::ReduceOp::sum);
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;
  // Clipping is a factor the update applies as it reads each gradient: no pass of its own.
  const float grad_scale = clip_norm > 0 ? clip_factor(norm, clip_norm) : 1.0f;

  options_.lr = lr;
  ++step_count_;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (any_rank_has_grad[i] == 0.0) continue;
    ++s.step;  // on every rank, for every parameter: the bias correction agrees everywhere
    const auto [begin, end] = local_range(s);
    if (begin >= end) continue;
    kernels::cpu::AdamWHyper h = adamw_hyper(options_, s.decay, s.step);
    h.grad_scale = grad_scale;
    const int64_t at = s.offset + begin - shard_begin_;  // in the shard
    k.adamw_step(arena_.values().narrow0(s.offset + begin, s.offset + end).device_f32(),
                 grad_shard_.narrow0(at, at + end - begin).device_f32(), m_.narrow0(at, at + end - begin).device_f32(),
                 v_.narrow0(at, at + end - begin).device_f32(), end - begin, h);
  }
  // Every rank's updated range to every rank, into the arena the parameters are views of.
  start = Clock::now();
  const Tensor mine = arena_.values().narrow0(shard_begin_, shard_begin_ + shard_);
  comm_.all_gather(mine.device_f32(), arena_.values().device_f32(), shard_);
  last_comm_s_ += since(start);
  return norm;
}

AdamWState ShardedAdamW::gather_state() {
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
  std::vector<std::pair<std::string, const Tensor*>> params;
  for (const Slot& s : slots_) params.emplace_back(s.name, s.param);
  check_adamw_state(st, params);
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
}

}  // namespace tarn
