#pragma once
// Helpers shared by the op files in framework/ops (private: not part of the op API).
#include <cstdint>
#include <vector>

#include "framework/backend.h"
#include "framework/staging.h"
#include "framework/tensor.h"

namespace tarn::ops_internal {

inline void check_f32(const char* op, const Tensor& t) {
  TARN_ASSERT(t.defined(), op, ": input is an undefined tensor");
  TARN_ASSERT(t.dtype() == DType::f32, op, ": expected f32, got ", dtype_name(t.dtype()), " (shape ",
              t.shape().str(), ")");
}

// Inputs of one op must share a device: name the op and both devices otherwise.
inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TARN_ASSERT(a.device() == b.device(), op, ": inputs on different devices: ", a.device().str(), " (shape ",
              a.shape().str(), ") and ", b.device().str(), " (shape ", b.shape().str(), ")");
}

// The kernel table of the device the (defined, f32) inputs live on: an op's one branch.
inline const kernels::Backend& kernels_for(const char* op, const Tensor& t) {
  check_f32(op, t);
  return backend_for(t.device());
}
inline const kernels::Backend& kernels_for(const char* op, const Tensor& a, const Tensor& b) {
  check_f32(op, a);
  check_f32(op, b);
  check_same_device(op, a, b);
  return backend_for(a.device());
}

// x (f32) rounded to bf16 in a fresh tensor on its device: the operands of the bf16 kernels of
// training.precision bf16 (framework/precision.h), made inside the ops that use them.
inline Tensor rounded_to_bf16(const char* op, const Tensor& x) {
  check_f32(op, x);
  Tensor r = Tensor::empty(x.shape(), x.device(), DType::bf16);
  backend_for(x.device()).cast_to_bf16(x.device_f32(), r.data<bf16>(), x.numel());
  return r;
}

// x (bf16) widened to f32, exactly: what a bf16 kernel's result becomes before autograd sees it.
inline Tensor widened_to_f32(const char* op, const Tensor& x) {
  TARN_ASSERT(x.dtype() == DType::bf16, op, ": expected bf16, got ", dtype_name(x.dtype()));
  Tensor r = Tensor::empty(x.shape(), x.device());
  backend_for(x.device()).cast_from_bf16(x.data<bf16>(), r.device_f32(), x.numel());
  return r;
}

// Token ids (targets, embedding ids) where the kernels of `device` read them: the host vector
// itself on the CPU, else a device copy kept alive by `holder` (4-byte elements in an f32
// buffer: Tensor has no integer dtype, and the kernels only see raw pointers): the batch's
// staged copy when `ids` is in the active StagedBatch (framework/staging.h), else one made now.
inline const int32_t* ids_on(Device device, const std::vector<int32_t>& ids, Tensor& holder) {
  if (device.is_cpu()) return ids.data();
  static_assert(sizeof(int32_t) == sizeof(float), "ids travel in an f32 buffer");
  if (const StagedBatch* staged = StagedBatch::active()) {
    holder = staged->ids(ids, device);
    if (holder.defined()) return reinterpret_cast<const int32_t*>(holder.device_f32());
  }
  holder = Tensor::empty(Shape{static_cast<int64_t>(ids.size())}, device);
  if (!ids.empty())
    backend_for(device).copy_host_to_device(holder.device_f32(), ids.data(), ids.size() * sizeof(int32_t),
                                            device.index);
  return reinterpret_cast<const int32_t*>(holder.device_f32());
}

// Row-major element strides of `s` as seen from an output of shape `out` it broadcasts to
// (NumPy alignment at the last axis; 0 along stretched or missing axes).
inline void broadcast_strides(const Shape& s, const Shape& out, int64_t* strides) {
  const int lead = out.size() - s.size();
  int64_t step = 1;
  for (int d = out.size() - 1; d >= 0; --d) {
    const int sd = d - lead;
    if (sd < 0) {
      strides[d] = 0;
      continue;
    }
    strides[d] = (s[sd] == 1 && out[d] != 1) ? 0 : step;
    step *= s[sd];
  }
}

}  // namespace tarn::ops_internal
