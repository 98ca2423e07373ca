#pragma once
// Layout copies behind transpose, permute, concat and slice: tensors stay contiguous, so a
// change of layout is one pass that reads and writes each element once.
#include <cstdint>

namespace tarn::kernels::cpu {

constexpr int kMaxLayoutDims = 8;

// dst[r * dst_stride + i] = src[r * src_stride + i] for r < rows, i < len. Concat and slice
// (and their backwards) are this with (rows = product of the leading extents, len = the
// run below the axis).
void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len);

// dst = src with its axes permuted: dst axis k is src axis order[k]. `shape` is src's (ndim
// extents). When the last axis moves, the copy goes through 32 x 32 tiles so that both reads
// and writes use whole cache lines.
void permute(const float* src, float* dst, const int64_t* shape, const int* order, int ndim);

}  // namespace tarn::kernels::cpu
