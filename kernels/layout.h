#pragma once
// Layout copies behind transpose, permute, concat and slice: tensors stay contiguous, so a
// change of layout is one pass that reads and writes each element once.
#include <cstdint>

#include "kernels/check.h"

namespace tarn::kernels::cpu {

constexpr int kMaxLayoutDims = 8;

// dst[r * dst_stride + i] = src[r * src_stride + i] for r < rows, i < len. Concat and slice
// (and their backwards) are this with (rows = product of the leading extents, len = the
// run below the axis).
void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len);

// Padding masks from the lengths of `rows` right-padded rows of `cols` positions (issue 51: a
// batch's masks are built on the device from B lengths instead of going up as B x cols floats
// twice): mask[r * cols + c] = 1 (padding) where c >= lengths[r], else 0, and keep = 1 - mask.
void padding_from_lengths(const int32_t* lengths, int64_t rows, int64_t cols, float* mask, float* keep);

// dst = src with its axes permuted: dst axis k is src axis order[k]. `shape` is src's (ndim
// extents). When the last axis moves, the copy goes through 32 x 32 tiles so that both reads
// and writes use whole cache lines.
void permute(const float* src, float* dst, const int64_t* shape, const int* order, int ndim);

// How a permute moves data, worked out on the host once for the CPU and CUDA kernels alike:
// the output axes with their source and destination strides, extent-1 axes dropped and an
// axis merged into the previous output axis when the source steps through both as one.
// Plain data, so the CUDA kernels take PermuteAxes by value.
struct PermuteAxes {
  int n = 0;
  int64_t extent[kMaxLayoutDims] = {};
  int64_t src_stride[kMaxLayoutDims] = {};
  int64_t dst_stride[kMaxLayoutDims] = {};
};

struct PermutePlan {
  int64_t numel = 0;
  PermuteAxes axes;  // merged output axes

  // Nothing moves: one contiguous copy of numel floats.
  bool is_copy() const { return axes.n == 0 || (axes.n == 1 && axes.src_stride[0] == 1); }
  // The innermost output axis is innermost in the source too: rows of contiguous floats.
  bool keeps_last_axis() const { return axes.src_stride[axes.n - 1] == 1; }
  // The output axis that walks the source contiguously (one exists unless numel == 0).
  int contiguous_axis() const {
    int p = 0;
    while (axes.src_stride[p] != 1) ++p;
    return p;
  }
  // Every axis but a and b (which may be equal), in order: the outer axes of a row copy, or
  // the batch of a tiled transpose.
  PermuteAxes except(int a, int b) const {
    PermuteAxes out;
    for (int d = 0; d < axes.n; ++d) {
      if (d == a || d == b) continue;
      out.extent[out.n] = axes.extent[d];
      out.src_stride[out.n] = axes.src_stride[d];
      out.dst_stride[out.n] = axes.dst_stride[d];
      ++out.n;
    }
    return out;
  }
};

inline PermutePlan plan_permute(const int64_t* shape, const int* order, int ndim) {
  TARN_CHECK(ndim >= 0 && ndim <= kMaxLayoutDims, "permute: at most ", kMaxLayoutDims, " dimensions, got ", ndim);
  int64_t src_stride[kMaxLayoutDims];
  PermutePlan plan;
  plan.numel = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    src_stride[d] = plan.numel;
    plan.numel *= shape[d];
  }
  if (plan.numel == 0) return plan;
  PermuteAxes& a = plan.axes;
  for (int k = 0; k < ndim; ++k) {
    const int64_t e = shape[order[k]], s = src_stride[order[k]];
    if (e == 1) continue;
    if (a.n > 0 && a.src_stride[a.n - 1] == s * e) {
      a.extent[a.n - 1] *= e;
      a.src_stride[a.n - 1] = s;
      continue;
    }
    a.extent[a.n] = e;
    a.src_stride[a.n] = s;
    ++a.n;
  }
  int64_t dst = 1;
  for (int d = a.n - 1; d >= 0; --d) {
    a.dst_stride[d] = dst;
    dst *= a.extent[d];
  }
  return plan;
}

}  // namespace tarn::kernels::cpu
