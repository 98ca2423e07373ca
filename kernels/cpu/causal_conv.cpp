#include "kernels/causal_conv.h"

#include <algorithm>

#include "kernels/check.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;  // dw: one block of channels a task, rows in order

void check(const CausalConvDims& d) {
  TARN_CHECK(d.batch >= 0 && d.n >= 0 && d.channels > 0 && d.taps >= 1, "causal conv: bad dims batch ", d.batch,
             " n ", d.n, " channels ", d.channels, " taps ", d.taps);
}

bool worth_threads(const CausalConvDims& d) { return d.batch * d.n * d.channels * d.taps >= kParallelGrain; }

}  // namespace

void causal_conv_forward(const CausalConvDims& d, const float* x, const float* w, float* y) {
  check(d);
  const int64_t rows = d.batch * d.n, c = d.channels;
#pragma omp parallel for schedule(static) if (worth_threads(d))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % d.n;
    float* out = y + r * c;
    std::fill(out, out + c, 0.0f);
    for (int64_t i = 0; i < d.taps && i <= t; ++i) {
      const float* in = x + (r - i) * c;
      const float* wi = w + i * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] += wi[j] * in[j];
    }
  }
}

void causal_conv_backward(const CausalConvDims& d, const float* x, const float* w, const float* dy, float* dx,
                          float* dw) {
  check(d);
  const int64_t rows = d.batch * d.n, c = d.channels;
  if (dx != nullptr) {
#pragma omp parallel for schedule(static) if (worth_threads(d))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = r % d.n;
      float* out = dx + r * c;
      std::fill(out, out + c, 0.0f);
      for (int64_t i = 0; i < d.taps && t + i < d.n; ++i) {
        const float* g = dy + (r + i) * c;
        const float* wi = w + i * c;
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) out[j] += wi[j] * g[j];
      }
    }
  }
  if (dw != nullptr) {
    const int64_t blocks = (c + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (worth_threads(d))
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t begin = blk * kChannelBlock, end = std::min(c, begin + kChannelBlock);
      for (int64_t i = 0; i < d.taps; ++i) std::fill(dw + i * c + begin, dw + i * c + end, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = r % d.n;
        const float* g = dy + r * c;
        for (int64_t i = 0; i < d.taps && i <= t; ++i) {
          const float* in = x + (r - i) * c;
          float* acc = dw + i * c;
#pragma omp simd
          for (int64_t j = begin; j < end; ++j) acc[j] += in[j] * g[j];
        }
      }
    }
  }
}

}  // namespace tarn::kernels::cpu
