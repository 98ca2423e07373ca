#include "kernels/memory.h"

#include <cstring>

#include "kernels/cpu/elementwise_parallel.h"

namespace tarn::kernels::cpu {

// parallel_chunks (not `omp parallel for simd if`): GCC 12 leaves the combined construct's body
// scalar, 4x slower on short arrays (kernels/cpu/elementwise_parallel.h).

void fill(float* dst, int64_t n, float value) {
  parallel_chunks(n, [=](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dst[i] = value;
  });
}

void copy(float* dst, const float* src, int64_t n) {
  parallel_chunks(n, [=](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
  });
}

void accumulate(float* dst, const float* src, int64_t n) {
  parallel_chunks(n, [=](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dst[i] += src[i];
  });
}

}  // namespace tarn::kernels::cpu
