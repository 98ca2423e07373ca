#pragma once
// Inverted dropout whose mask is a pure function of (seed, stream, element index): element i
// is kept iff Philox4x32-10(seed, stream) output number i (framework/rng.h's philox_at, the
// cuRAND layout) is >= dropout_threshold(p), so P(drop) = p to within 2^-32. Nothing is stored:
// the backward regenerates the same mask. Counter-based, so any thread can draw any element.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tarn::kernels::cpu {

// round(p * 2^32): outputs below it are dropped. 2^32 (everything dropped) when p >= 1. Inline:
// the CUDA kernels (kernels/cuda/dropout.cu) draw against the same threshold.
inline uint64_t dropout_threshold(float p) {
  constexpr double kTwo32 = 4294967296.0;
  if (!(p > 0.0f)) return 0;
  if (p >= 1.0f) return static_cast<uint64_t>(kTwo32);
  return std::min<uint64_t>(static_cast<uint64_t>(std::llround(static_cast<double>(p) * kTwo32)),
                            static_cast<uint64_t>(kTwo32));
}

// y[i] = x[i] * (keep(i) ? 1 / (1 - p) : 0) for i < n (a mask multiply, as PyTorch's: a dropped
// inf or NaN gives NaN); p in [0, 1], p == 1 gives zeros. Serves the forward (x = input) and
// the backward (x = dy, y = dx) alike.
void dropout_apply(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream);

}  // namespace tarn::kernels::cpu
