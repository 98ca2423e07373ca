#include "framework/module.h"

#include <algorithm>
#include <map>

namespace tarn {
namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Tensor& Module::register_parameter(const std::string& name, Tensor& t, Init init) {
  TARN_ASSERT(t.defined(), "register_parameter: ", name, " is undefined");
  t.set_requires_grad(true);
  params_.emplace_back(name, &t);
  if (init == Init::kept_initial_value) kept_.push_back(&t);
  return t;
}

void Module::keep_initial_value(const Tensor& t) {
  const bool registered = std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.second == &t; });
  TARN_ASSERT(registered, "keep_initial_value: not a parameter of this module");
  if (!keeps_initial_value(&t)) kept_.push_back(&t);
}

bool Module::keeps_initial_value(const Tensor* t) const {
  if (std::find(kept_.begin(), kept_.end(), t) != kept_.end()) return true;
  for (const auto& [name, m] : children_)
    if (m->keeps_initial_value(t)) return true;
  return false;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& t) {
  buffers_.emplace_back(name, &t);
  return t;
}

Module::Named Module::named(Named Module::*list, const std::string& prefix) const {
  Named out;
  for (const auto& [name, t] : this->*list) out.emplace_back(join(prefix, name), t);
  for (const auto& [name, m] : children_) {
    Named sub = m->named(list, join(prefix, name));
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters(const std::string& prefix) const {
  return named(&Module::params_, prefix);
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(const std::string& prefix) const {
  return named(&Module::buffers_, prefix);
}

std::vector<Tensor*> Module::parameters() const {
  std::vector<Tensor*> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (Tensor* t : parameters()) n += t->numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

void Module::set_precision(Precision p) {
  precision_ = p;
  for (auto& [name, m] : children_) m->set_precision(p);
}

void Module::zero_grad() {
  for (Tensor* t : parameters()) t->zero_grad();
}

void Module::to(Device device) {
  // Keyed by the data pointer, so that tied tensors (two handles on one buffer) stay tied.
  std::map<const void*, Tensor> moved;
  auto move = [&](Tensor* t, bool parameter) {
    if (!t->defined() || t->device() == device) return;
    const void* key = t->data<char>();
    auto it = moved.find(key);
    if (it == moved.end()) {
      Tensor copy = t->to(device);
      if (parameter) copy.set_requires_grad(true);
      it = moved.emplace(key, copy).first;
    }
    *t = it->second;
  };
  if (arena_ && arena_->device() != device) {
    arena_ = std::make_shared<ParameterArena>(parameters(), device, arena_->align(), arena_->pad_to());
    zero_grad();
  }
  for (const auto& [name, t] : named_parameters()) move(t, true);  // nothing left to move when flattened
  for (const auto& [name, t] : named_buffers()) move(t, false);
}

ParameterArena& Module::flatten_parameters(int64_t pad_to) {
  if (arena_ && arena_->holds_its_parameters() && arena_->pad_to() % pad_to == 0) return *arena_;
  const std::vector<Tensor*> params = parameters();
  const Device device = params.empty() ? Device::cpu() : params.front()->device();
  arena_ = std::make_shared<ParameterArena>(params, device, ParameterArena::kDefaultAlign, pad_to);
  return *arena_;
}

}  // namespace tarn
