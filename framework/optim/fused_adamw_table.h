#pragma once
// What the fused AdamW kernels (kernels/optim.h: adamw_fused_step, adamw_fused_update) read and
// write in device memory, for AdamW::fused_step and ShardedAdamW alike: the table of ranges, one
// per parameter (its has_grad as last uploaded), and the step counts, one int64 of applied steps
// then an AdamWRangeState per range. The host keeps the table's copy and sends it only when a
// range's has_grad changed: once, in a run whose every parameter has a gradient every step.
#include <cstdint>
#include <vector>

#include "framework/device.h"
#include "framework/tensor.h"
#include "kernels/optim.h"

namespace tarn {

struct AdamWOptions;

class FusedAdamWTable {
 public:
  FusedAdamWTable() = default;
  // Lays the ranges out (adamw_fused_layout) and allocates the table and the counts on `device`.
  FusedAdamWTable(std::vector<kernels::cpu::AdamWRange> ranges, Device device);

  int64_t size() const { return static_cast<int64_t>(ranges_.size()); }
  int64_t blocks() const { return blocks_; }

  // Sets range i's has_grad; upload() then sends the table if any changed since it last did.
  void set_has_grad(size_t i, bool has);
  void upload();

  // In device memory, for the kernels.
  const kernels::cpu::AdamWRange* ranges() const;
  int64_t* applied_steps() const;
  kernels::cpu::AdamWRangeState* states() const;

  // The counts, read back (returns the applied steps; `steps` gets each range's) or written.
  int64_t read_counts(std::vector<int64_t>& steps) const;
  void write_counts(int64_t applied_steps, const std::vector<int64_t>& steps);

 private:
  Device device_ = Device::cpu();
  std::vector<kernels::cpu::AdamWRange> ranges_;
  int64_t blocks_ = 0;
  Tensor device_ranges_, device_counts_;  // f32 tensors used as storage
  bool uploaded_ = false;
};

// `bytes` of `device` memory, as the storage of an f32 tensor: tables and counters that kernels
// read and write in place.
Tensor storage_bytes(size_t bytes, Device device);

// The fused step's settings: `options`' betas and eps, with this step's lr and clipping norm.
kernels::cpu::AdamWFusedHyper fused_hyper(const AdamWOptions& options, float lr, float max_norm);

}  // namespace tarn
