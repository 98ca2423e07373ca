#include "kernels/memory.h"

#include <cstring>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {

void fill(float* dst, int64_t n, float value) {
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = value;
}

void copy(float* dst, const float* src, int64_t n) {
  if (n <= kParallelGrain) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

void accumulate(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n > kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace tarn::kernels::cpu
