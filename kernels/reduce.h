#pragma once
// Sums over one axis and over everything, and the broadcast that is their backward.
// Deterministic: every sum is cut into fixed blocks whose boundaries depend only on the sizes,
// never on the thread count, and the block results are combined in order. Blocks are summed in
// f32 with vector accumulators; the scalar total combines block sums in double.
#include <cstdint>

namespace tarn::kernels::cpu {

// x viewed as (outer, n, inner); out (outer, inner) = alpha * sum over the middle axis.
void sum_axis(const float* x, float* out, int64_t outer, int64_t n, int64_t inner, float alpha = 1.0f);

// Sum of n values, in double.
double sum_all(const float* x, int64_t n);

// The backward of sum_axis: dx (outer, n, inner) = alpha * dy (outer, inner) repeated over n.
void broadcast_axis(const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner, float alpha = 1.0f);

}  // namespace tarn::kernels::cpu
