#include "framework/distributed/sharded_adamw.h"

#include <chrono>
#include <cmath>
#include <map>

#include "framework/backend.h"
#include "framework/distributed/gradient_sync.h"
#include "kernels/optim.h"

namespace tarn {
namespace {
// torch.nn.utils.clip_grad_norm_'s epsilon (framework/optim/clip_grad.cpp).
constexpr double kClipEpsilon = 1e-6;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

ShardedAdamW::ShardedAdamW(const std::vector<std::pair<std::string, Tensor*>>& params, const AdamWOptions& options,
                           kernels::Communicator& comm, DecayRule decays)
    : options_(options), comm_(comm) {
  TARN_ASSERT(!params.empty(), "ShardedAdamW: no parameters");
  std::map<const float*, std::string> owners;
  const Device device = params.front().second->device();
  for (const auto& [name, p] : params) {
    TARN_ASSERT(p && p->defined() && p->dtype() == DType::f32, "ShardedAdamW: parameter ", name, " must be f32");
    TARN_ASSERT(p->device() == device, "ShardedAdamW: parameters on ", device.str(), " and ", p->device().str());
    if (!owners.try_emplace(p->device_f32(), name).second) continue;  // tied: updated once
    slots_.push_back({name, p, total_, 0, decays(name)});
    total_ += p->numel();
  }
  const int64_t world = comm_.world();
  shard_ = (total_ + world - 1) / world;
  padded_ = shard_ * world;
  shard_begin_ = shard_ * comm_.rank();
  flat_ = Tensor::zeros(Shape{padded_}, device);  // the padding stays zero
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
  const kernels::Backend& k = backend_for(flat_.device());
  for (const Slot& s : slots_) pack_gradient(*s.param, flat_.narrow0(s.offset, s.offset + s.param->numel()));
  auto start = Clock::now();
  comm_.reduce_scatter_sum(flat_.device_f32(), grad_shard_.device_f32(), shard_);
  last_comm_s_ = since(start);

  double sum = k.sum_squares(grad_shard_.device_f32(), shard_);
  comm_.all_reduce_host(&sum, 1, kernels::ReduceOp::sum);
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;
  if (clip_norm > 0 && norm > clip_norm)
    k.scale_inplace(grad_shard_.device_f32(), shard_, static_cast<float>(clip_norm / (norm + kClipEpsilon)));

  options_.lr = lr;
  ++step_count_;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (any_rank_has_grad[i] == 0.0) continue;
    ++s.step;  // on every rank, for every parameter: the bias correction agrees everywhere
    const auto [begin, end] = local_range(s);
    if (begin >= end) continue;
    const kernels::cpu::AdamWHyper h = adamw_hyper(options_, s.decay, s.step);
    const int64_t at = s.offset + begin - shard_begin_;  // in the shard
    Tensor p = flat_view(*s.param).narrow0(begin, end);
    k.adamw_step(p.device_f32(), grad_shard_.narrow0(at, at + end - begin).device_f32(),
                 m_.narrow0(at, at + end - begin).device_f32(), v_.narrow0(at, at + end - begin).device_f32(), end - begin,
                 h);
    flat_.narrow0(s.offset + begin, s.offset + end).copy_from(p);  // my part, for the all-gather
  }
  start = Clock::now();
  Tensor mine = flat_.narrow0(shard_begin_, shard_begin_ + shard_);
  comm_.all_gather(mine.device_f32(), flat_.device_f32(), shard_);
  last_comm_s_ += since(start);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (any_rank_has_grad[i] == 0.0) continue;
    s.param->copy_from(flat_.narrow0(s.offset, s.offset + s.param->numel()));
  }
  return norm;
}

AdamWState ShardedAdamW::gather_state() {
  Tensor full_m = Tensor::zeros(Shape{padded_}, flat_.device()), full_v = Tensor::zeros(Shape{padded_}, flat_.device());
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
