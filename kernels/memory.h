#pragma once
// Bulk fills, copies and accumulation: what the tensor core itself needs (creation, gradient
// accumulation). Memory-bound; parallel above a size where threads pay for themselves.
#include <cstdint>

namespace tarn::kernels::cpu {

void fill(float* dst, int64_t n, float value);
void copy(float* dst, const float* src, int64_t n);
void accumulate(float* dst, const float* src, int64_t n);  // dst += src

}  // namespace tarn::kernels::cpu
