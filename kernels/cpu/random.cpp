// Random fills on the CPU (kernels/random.h): the reference the CUDA fills are checked against.
// Each value is a pure function of its position in the stream, so the loops split freely
// across threads.
#include "kernels/random.h"

#include <cmath>

#include "kernels/check.h"
#include "kernels/cuda/philox.cuh"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

constexpr int kWords = 4;  // outputs per Philox block

void check_fill(const char* op, const float* out, int64_t n) {
  TARN_ASSERT(n >= 0, op, ": negative length ", n);
  TARN_ASSERT(n == 0 || out != nullptr, op, ": null output buffer for ", n, " values");
}

// Calls visit(i, word) for the words offset .. offset + count - 1 of the stream, i counted from
// 0, a Philox block at a time.
template <typename Visit>
void for_each_word(const PhiloxPosition& at, int64_t count, Visit visit) {
  const uint64_t first_block = at.offset / kWords;
  const uint64_t last_block = (at.offset + static_cast<uint64_t>(count) - 1) / kWords;
  const int64_t blocks = count > 0 ? static_cast<int64_t>(last_block - first_block + 1) : 0;
#pragma omp parallel for schedule(static) if (count > kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t block = first_block + static_cast<uint64_t>(b);
    const philox::Words r = philox::block(at.seed, at.stream, block);
    for (int w = 0; w < kWords; ++w) {
      const uint64_t word = block * kWords + static_cast<uint64_t>(w);
      if (word < at.offset) continue;
      const int64_t i = static_cast<int64_t>(word - at.offset);
      if (i < count) visit(i, r.w[w]);
    }
  }
}

}  // namespace

void uniform_fill(float* out, int64_t n, float low, float high, const PhiloxPosition& at) {
  check_fill("uniform_fill", out, n);
  TARN_ASSERT(low <= high, "uniform_fill: low ", low, " is above high ", high);
  const float span = high - low;
  for_each_word(at, n, [=](int64_t i, uint32_t word) { out[i] = std::fma(span, random_math::to_uniform(word), low); });
}

void normal_fill(float* out, int64_t n, float mean, float stddev, const PhiloxPosition& at) {
  check_fill("normal_fill", out, n);
  TARN_ASSERT(stddev >= 0.0f, "normal_fill: negative standard deviation ", stddev);
  const uint64_t first = at.offset;
#pragma omp parallel for schedule(static) if (n > kParallelGrain / 8)
  for (int64_t i = 0; i < n; ++i) {
    // Words p and p + 1 share a block unless p % 4 == 3 (an odd offset).
    const uint64_t p = first + 2 * static_cast<uint64_t>(i);
    const philox::Words a = philox::block(at.seed, at.stream, p / kWords);
    const uint32_t x = a.w[p % kWords];
    const uint32_t y = (p % kWords == kWords - 1) ? philox::block(at.seed, at.stream, p / kWords + 1).w[0]
                                                  : a.w[p % kWords + 1];
    out[i] = std::fma(stddev, random_math::to_normal(x, y), mean);
  }
}

}  // namespace tarn::kernels::cpu
