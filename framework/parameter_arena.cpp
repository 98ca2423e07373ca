#include "framework/parameter_arena.h"

#include <map>

#include "framework/autograd.h"

namespace tarn {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

ParameterArena::ParameterArena(const std::vector<Tensor*>& params, Device device, int64_t align, int64_t pad_to)
    : align_(align), pad_to_(pad_to) {
  TARN_ASSERT(align >= 1 && pad_to >= 1, "ParameterArena: align (", align, ") and pad_to (", pad_to,
              ") must be at least 1");
  // Tied handles (one tensor listed under two names) share a range: keyed by the data pointer,
  // as Module::to() and AdamW key them.
  std::map<const void*, size_t> range_by_data;
  std::vector<size_t> range_of_handle(params.size());
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor* p = params[i];
    TARN_ASSERT(p && p->defined() && p->dtype() == DType::f32, "ParameterArena: parameter ", i,
                " must be a defined f32 tensor");
    // Empty tensors may share a data pointer without being tied: each gets its own range.
    const auto [it, fresh] = p->numel() > 0 ? range_by_data.try_emplace(p->data<char>(), ranges_.size())
                                            : std::make_pair(range_by_data.end(), true);
    if (fresh) {
      const int64_t offset = round_up(total, align);
      ranges_.push_back({p, offset, p->numel()});
      total = offset + p->numel();
    } else {
      const Range& r = ranges_[it->second];
      TARN_ASSERT(r.param->shape() == p->shape() && r.param->meta() == p->meta(), "ParameterArena: parameters ",
                  r.param->str(0), " and ", p->str(0),
                  " share storage but not their shape and autograd state (tie them by copying one handle)");
    }
    range_of_handle[i] = fresh ? ranges_.size() - 1 : it->second;
  }
  values_ = Tensor::zeros(Shape{round_up(total, pad_to)}, device);
  grads_ = Tensor::zeros(Shape{values_.numel()}, device);
  for (const Range& r : ranges_) values_.narrow0(r.offset, r.end()).copy_from(*r.param);
  for (size_t i = 0; i < params.size(); ++i) {
    const Range& r = ranges_[range_of_handle[i]];
    Tensor* p = params[i];
    p->share_data_of(values_.narrow0(r.offset, r.end()).view(p->shape()));
    AutogradMeta& meta = *p->mutable_meta();
    const Tensor home = grads_.narrow0(r.offset, r.end()).view(p->shape());
    if (meta.grad_home.same_storage(home) && meta.grad_home.data<char>() == home.data<char>()) continue;  // tied
    const Tensor previous = meta.grad;
    meta.grad_home = home;
    meta.grad = Tensor();
    if (previous.defined()) {
      meta.grad_home.copy_from(previous);
      meta.grad = meta.grad_home;
    }
  }
}

int64_t ParameterArena::range_of(const Tensor& param) const {
  if (!param.defined() || !param.same_storage(values_)) return -1;
  const float* at = param.data<float>();
  for (size_t r = 0; r < ranges_.size(); ++r)  // the handle itself first: empty ranges share offsets
    if (ranges_[r].param == &param && values_.data<float>() + ranges_[r].offset == at) return static_cast<int64_t>(r);
  for (size_t r = 0; r < ranges_.size(); ++r)
    if (values_.data<float>() + ranges_[r].offset == at && ranges_[r].numel == param.numel())
      return static_cast<int64_t>(r);
  return -1;
}

bool ParameterArena::holds_its_parameters() const {
  for (size_t r = 0; r < ranges_.size(); ++r)
    if (range_of(*ranges_[r].param) != static_cast<int64_t>(r)) return false;
  return true;
}

void ParameterArena::settle_grad(size_t r) const {
  const Range& range = ranges_.at(r);
  Tensor slot = grads_.narrow0(range.offset, range.end());
  const Tensor g = range.param->grad();
  if (!g.defined()) {
    slot.fill(0.0f);
    return;
  }
  if (g.same_storage(grads_) && g.data<char>() == slot.data<char>()) return;  // autograd put it there
  slot.copy_from(g);
  range.param->set_grad(slot.view(range.param->shape()));
}

void ParameterArena::adopt_grad(size_t r) const {
  const Range& range = ranges_.at(r);
  range.param->set_grad(grads_.narrow0(range.offset, range.end()).view(range.param->shape()));
}

}  // namespace tarn
