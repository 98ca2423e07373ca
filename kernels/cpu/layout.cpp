#include "kernels/layout.h"

#include <algorithm>
#include <cstring>

#include "kernels/memory.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

constexpr int64_t kTile = 32;  // transpose tile edge: 32 floats = two cache lines per row

// Row-major index r over `ndim` extents -> the offset sum of index_d * stride[d], peeling the
// extents from the innermost outwards.
int64_t source_offset(int64_t r, const int64_t* extent, const int64_t* stride, int ndim) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (r % extent[d]) * stride[d];
    r /= extent[d];
  }
  return off;
}

}  // namespace

void padding_from_lengths(const int32_t* lengths, int64_t rows, int64_t cols, float* mask, float* keep) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const bool pad = c >= lengths[r];
      mask[r * cols + c] = pad ? 1.0f : 0.0f;
      keep[r * cols + c] = pad ? 0.0f : 1.0f;
    }
}

void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len) {
  if (rows == 1) return copy(dst, src, len);  // one long run: parallel inside copy()
#pragma omp parallel for if (rows * len > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(len) * sizeof(float));
}

void permute(const float* src, float* dst, const int64_t* shape, const int* order, int ndim) {
  const PermutePlan plan = plan_permute(shape, order, ndim);
  const int64_t numel = plan.numel;
  if (numel == 0) return;
  if (plan.is_copy()) return copy(dst, src, numel);  // the identity in disguise
  const PermuteAxes& a = plan.axes;
  const int q = a.n - 1;  // the innermost output axis

  if (plan.keeps_last_axis()) {
    // The innermost axis stays innermost: copy runs of a.extent[q] contiguous floats.
    const PermuteAxes outer = plan.except(q, q);
    const int64_t len = a.extent[q], rows = numel / len;
#pragma omp parallel for if (numel > kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * len, src + source_offset(r, outer.extent, outer.src_stride, outer.n),
                  static_cast<size_t>(len) * sizeof(float));
    return;
  }

  // The innermost axis moves: transpose tiles of (axis p, last axis q), where p is the output
  // axis that walks the source contiguously. The other axes form a batch.
  const int p = plan.contiguous_axis();
  const PermuteAxes b = plan.except(p, q);
  int64_t batch = 1;
  for (int d = 0; d < b.n; ++d) batch *= b.extent[d];
  const int64_t np = a.extent[p], nq = a.extent[q], sq = a.src_stride[q], dp = a.dst_stride[p];
  const int64_t tp = (np + kTile - 1) / kTile, tq = (nq + kTile - 1) / kTile;
#pragma omp parallel for if (numel > kParallelGrain) schedule(static)
  for (int64_t t = 0; t < batch * tp * tq; ++t) {
    const int64_t bi = t / (tp * tq), i0 = ((t / tq) % tp) * kTile, j0 = (t % tq) * kTile;
    const int64_t so = source_offset(bi, b.extent, b.src_stride, b.n);
    const int64_t dof = source_offset(bi, b.extent, b.dst_stride, b.n);
    const int64_t i1 = std::min(np, i0 + kTile), j1 = std::min(nq, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i) {
      const float* s = src + so + i;
      float* d = dst + dof + i * dp;
      for (int64_t j = j0; j < j1; ++j) d[j] = s[j * sq];
    }
  }
}

}  // namespace tarn::kernels::cpu
