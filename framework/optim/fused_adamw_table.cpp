#include "framework/optim/fused_adamw_table.h"

#include <cstring>
#include <utility>

#include "framework/backend.h"
#include "framework/optim/adamw.h"

namespace tarn {

Tensor storage_bytes(size_t bytes, Device device) {
  return Tensor::zeros(Shape{static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float))}, device);
}

FusedAdamWTable::FusedAdamWTable(std::vector<kernels::cpu::AdamWRange> ranges, Device device)
    : device_(device), ranges_(std::move(ranges)) {
  blocks_ = kernels::cpu::adamw_fused_layout(ranges_.data(), size());
  device_ranges_ = storage_bytes(ranges_.size() * sizeof(kernels::cpu::AdamWRange), device);
  device_counts_ = storage_bytes(sizeof(int64_t) + ranges_.size() * sizeof(kernels::cpu::AdamWRangeState), device);
}

void FusedAdamWTable::set_has_grad(size_t i, bool has) {
  const int32_t h = has ? 1 : 0;
  uploaded_ &= ranges_[i].has_grad == h;
  ranges_[i].has_grad = h;
}

void FusedAdamWTable::upload() {
  if (uploaded_) return;
  backend_for(device_).copy_host_to_device(device_ranges_.device_f32(), ranges_.data(),
                                           ranges_.size() * sizeof(kernels::cpu::AdamWRange), device_.index);
  uploaded_ = true;
}

const kernels::cpu::AdamWRange* FusedAdamWTable::ranges() const {
  return reinterpret_cast<const kernels::cpu::AdamWRange*>(device_ranges_.device_f32());
}

int64_t* FusedAdamWTable::applied_steps() const { return reinterpret_cast<int64_t*>(device_counts_.device_f32()); }

kernels::cpu::AdamWRangeState* FusedAdamWTable::states() const {
  return reinterpret_cast<kernels::cpu::AdamWRangeState*>(applied_steps() + 1);
}

int64_t FusedAdamWTable::read_counts(std::vector<int64_t>& steps) const {
  std::vector<char> host(static_cast<size_t>(device_counts_.numel()) * sizeof(float));
  backend_for(device_).copy_device_to_host(host.data(), device_counts_.device_f32(), host.size(), device_.index);
  int64_t applied = 0;
  std::memcpy(&applied, host.data(), sizeof applied);
  steps.resize(ranges_.size());
  for (size_t i = 0; i < ranges_.size(); ++i) {
    kernels::cpu::AdamWRangeState st;
    std::memcpy(&st, host.data() + sizeof(int64_t) + i * sizeof st, sizeof st);
    steps[i] = st.step;
  }
  return applied;
}

void FusedAdamWTable::write_counts(int64_t applied_steps, const std::vector<int64_t>& steps) {
  std::vector<char> host(static_cast<size_t>(device_counts_.numel()) * sizeof(float), 0);
  std::memcpy(host.data(), &applied_steps, sizeof applied_steps);
  for (size_t i = 0; i < ranges_.size(); ++i) {
    kernels::cpu::AdamWRangeState st;
    st.step = steps[i];
    std::memcpy(host.data() + sizeof(int64_t) + i * sizeof st, &st, sizeof st);
  }
  backend_for(device_).copy_host_to_device(device_counts_.device_f32(), host.data(), host.size(), device_.index);
}

kernels::cpu::AdamWFusedHyper fused_hyper(const AdamWOptions& options, float lr, float max_norm) {
  kernels::cpu::AdamWFusedHyper h;
  h.lr = lr;
  h.beta1 = options.beta1;
  h.beta2 = options.beta2;
  h.eps = options.eps;
  h.max_norm = max_norm;
  return h;
}

}  // namespace tarn
