#pragma once
// The row-local feature maps of kernels/feature_maps.h as device functions, for the kernels
// that fuse phi into their loads (linear_attention*.cu): phi(Q), phi(K) are computed on the fly
// from the raw q, k and never written to memory. Same semantics as the CPU maps
// (kernels/cpu/feature_maps.cpp):
//
//   elu1      phi(x) = x + 1 (x > 0), exp(x) (x <= 0)    phi'(x) = 1 (x > 0), exp(x) (x <= 0)
//   relu      phi(x) = max(x, 0)                         phi'(x) = 1 (x > 0), 0 (x <= 0)
//   identity  phi(x) = x                                 phi'(x) = 1
//   exp       phi(x)_k = exp(x_k - m), m = max_j x_j over the row (NOT elementwise)
//
// exp and its row max. A kernel computes m from the whole raw row (all d features, even when
// it loads only a tile of columns), e.g. one warp per row with warp_argmax below, and then
// applies phi_exp(x_k, m). The max is differentiated through, as on the CPU: with y = phi(x),
//   dx_k = y_k dy_k - [k == top] * sum_j y_j dy_j,   top = the FIRST index holding the max
// (the shift moves with x_top and only with it). That needs the whole row of dy, so a kernel
// whose output tile covers only some columns writes dy first and then runs a row-wise pass
// (exp_row_backward below, one warp per row); elementwise maps chain phi'(x) into
// the value they write (chain_elementwise).
//
// Exponentials are expf (CUDA's ~2 ulp, the emulator's libm): not the CPU's Cephes bits, and
// expf returns denormals where the CPU flushes below ln(FLT_MIN); both differences are ulps.
//
// Include after kernels/cuda/common.cuh (it needs TARN_CUDA_NS, device::kWarp and the
// shuffles); the functions live in tarn::kernels::TARN_CUDA_NS::fmap.
#include "kernels/cuda/common.cuh"
#include "kernels/feature_maps.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace fmap {

using cpu::FeatureMap;

// True for the maps whose value at x_k depends on x_k alone (exp needs its row's max; favor is
// not row-local at all and is applied by favor_forward before the attention kernels).
__host__ __device__ __forceinline__ bool is_elementwise(FeatureMap kind) {
  return kind == FeatureMap::elu1 || kind == FeatureMap::relu || kind == FeatureMap::identity;
}

// phi(x) for the elementwise maps.
__device__ __forceinline__ float phi_elementwise(FeatureMap kind, float x) {
  switch (kind) {
    case FeatureMap::elu1: return x > 0.0f ? x + 1.0f : expf(x);
    case FeatureMap::relu: return x > 0.0f ? x : 0.0f;
    default: return x;  // identity
  }
}

// phi'(x) for the elementwise maps.
__device__ __forceinline__ float dphi_elementwise(FeatureMap kind, float x) {
  switch (kind) {
    case FeatureMap::elu1: return x > 0.0f ? 1.0f : expf(x);
    case FeatureMap::relu: return x > 0.0f ? 1.0f : 0.0f;
    default: return 1.0f;  // identity
  }
}

// The exp map's value at x given its row's max m.
__device__ __forceinline__ float phi_exp(float x, float row_max) { return expf(x - row_max); }

// Any row-local map: row_max is ignored unless kind is exp.
__device__ __forceinline__ float phi(FeatureMap kind, float x, float row_max) {
  return kind == FeatureMap::exp ? phi_exp(x, row_max) : phi_elementwise(kind, x);
}

// dx = phi'(x) dy for the elementwise maps; exp passes dy through (its Jacobian is applied by
// exp_row_backward once the whole row of dy is written).
__device__ __forceinline__ float chain_elementwise(FeatureMap kind, float x, float dy) {
  return is_elementwise(kind) ? dy * dphi_elementwise(kind, x) : dy;
}

// A running (max, first index of it) pair. combine keeps the larger value and, on a tie, the
// smaller index, so that any reduction order finds the CPU's first argmax. Index: int within a
// row, int64_t within a slice (linear_attention_favor.cu).
template <typename Index>
struct MaxAt {
  float value;
  Index index;
};
template <typename Index>
__device__ __forceinline__ MaxAt<Index> combine(MaxAt<Index> a, MaxAt<Index> b) {
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}
using ArgMax = MaxAt<int>;

// The max of x(0) .. x(n - 1) and its first index, over one warp (every lane of the warp calls
// it with the same x and n, n >= 1; every lane gets the result). x(k) returns element k as a
// float: a raw f32 row's element, or a bf16 one widened.
template <class Load>
__device__ __forceinline__ ArgMax warp_argmax_of(const Load& x, int n) {
  const int lane = threadIdx.x % device::kWarp;
  ArgMax best{-__int_as_float(0x7f800000), n};  // -inf at an index past every real one
  for (int k = lane; k < n; k += device::kWarp) best = combine(best, ArgMax{x(k), k});
  for (int m = device::kWarp / 2; m > 0; m /= 2) {
    const ArgMax other{__shfl_xor_sync(device::kFullMask, best.value, m),
                       __shfl_xor_sync(device::kFullMask, best.index, m)};
    best = combine(best, other);
  }
  if (best.index == n) best.index = 0;  // an all -inf (or NaN) row: the CPU's argmax is 0
  return best;
}

// The same over a row of n floats.
__device__ __forceinline__ ArgMax warp_argmax(const float* x, int n) {
  return warp_argmax_of([x](int k) { return x[k]; }, n);
}

// The exp map's backward on one row, by one warp: x(k) is the raw input, g(k) dL/dy_k with y
// recomputed (y_k = exp(x_k - max x)), and store(k, v) receives dL/dx_k. Each lane stores only
// the elements it read, after the row's sum is known, so store may overwrite g in place.
template <class Load, class Grad, class Store>
__device__ __forceinline__ void exp_row_backward(const Load& x, const Grad& g, const Store& store, int n) {
  const int lane = threadIdx.x % device::kWarp;
  const ArgMax top = warp_argmax_of(x, n);
  float dot = 0.0f;
  for (int k = lane; k < n; k += device::kWarp) dot += phi_exp(x(k), top.value) * g(k);
  dot = device::warp_reduce(dot, device::Sum());
  for (int k = lane; k < n; k += device::kWarp)
    store(k, phi_exp(x(k), top.value) * g(k) - (k == top.index ? dot : 0.0f));
}

}  // namespace fmap
}  // namespace tarn::kernels::TARN_CUDA_NS
