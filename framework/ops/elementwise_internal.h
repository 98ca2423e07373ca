#pragma once
// Helpers shared by the op files in framework/ops (private: not part of the op API).
#include "framework/tensor.h"

namespace tarn::ops_internal {

// The CPU kernels read f32 host memory; say which op was handed something else.
inline void check_cpu_f32(const char* op, const Tensor& t) {
  TARN_CHECK(t.defined(), op, ": input is an undefined tensor");
  TARN_CHECK(t.device().is_cpu(), op, ": the CPU kernel got a tensor on ", t.device().str(), " (shape ",
             t.shape().str(), ")");
  TARN_CHECK(t.dtype() == DType::f32, op, ": expected f32, got ", dtype_name(t.dtype()), " (shape ",
             t.shape().str(), ")");
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
