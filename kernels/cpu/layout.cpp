#include "kernels/layout.h"

#include <algorithm>
#include <cstring>

#include "kernels/check.h"
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

void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t len) {
  if (rows == 1) return copy(dst, src, len);  // one long run: parallel inside copy()
#pragma omp parallel for if (rows * len > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(len) * sizeof(float));
}

void permute(const float* src, float* dst, const int64_t* shape, const int* order, int ndim) {
  TARN_CHECK(ndim <= kMaxLayoutDims, "permute: at most ", kMaxLayoutDims, " dimensions, got ", ndim);
  int64_t src_stride[kMaxLayoutDims];
  int64_t numel = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    src_stride[d] = numel;
    numel *= shape[d];
  }
  if (numel == 0) return;
  // Output axes with their source strides; drop extent-1 axes and merge an axis into the next
  // when the source steps through both as one.
  int64_t ext[kMaxLayoutDims], str[kMaxLayoutDims];
  int m = 0;
  for (int k = 0; k < ndim; ++k) {
    const int64_t e = shape[order[k]], s = src_stride[order[k]];
    if (e == 1) continue;
    if (m > 0 && str[m - 1] == s * e) {
      ext[m - 1] *= e;
      str[m - 1] = s;
      continue;
    }
    ext[m] = e;
    str[m] = s;
    ++m;
  }
  if (m == 0 || (m == 1 && str[0] == 1)) return copy(dst, src, numel);  // the identity in disguise

  if (str[m - 1] == 1) {
    // The innermost axis stays innermost: copy runs of ext[m-1] contiguous floats.
    const int64_t len = ext[m - 1], rows = numel / len;
#pragma omp parallel for if (numel > kParallelGrain) schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * len, src + source_offset(r, ext, str, m - 1), static_cast<size_t>(len) * sizeof(float));
    return;
  }

  // The innermost axis moves: transpose tiles of (axis p, last axis q), where p is the output
  // axis that walks the source contiguously. The other axes form a batch.
  int p = 0;
  while (str[p] != 1) ++p;
  const int q = m - 1;
  int64_t dst_stride[kMaxLayoutDims];
  {
    int64_t s = 1;
    for (int d = m - 1; d >= 0; --d) {
      dst_stride[d] = s;
      s *= ext[d];
    }
  }
  int64_t bext[kMaxLayoutDims], bsrc[kMaxLayoutDims], bdst[kMaxLayoutDims];
  int nb = 0;
  for (int d = 0; d < m; ++d) {
    if (d == p || d == q) continue;
    bext[nb] = ext[d];
    bsrc[nb] = str[d];
    bdst[nb] = dst_stride[d];
    ++nb;
  }
  int64_t batch = 1;
  for (int d = 0; d < nb; ++d) batch *= bext[d];
  const int64_t np = ext[p], nq = ext[q], sq = str[q], dp = dst_stride[p];
  const int64_t tp = (np + kTile - 1) / kTile, tq = (nq + kTile - 1) / kTile;
#pragma omp parallel for if (numel > kParallelGrain) schedule(static)
  for (int64_t t = 0; t < batch * tp * tq; ++t) {
    const int64_t bi = t / (tp * tq), i0 = ((t / tq) % tp) * kTile, j0 = (t % tq) * kTile;
    const int64_t so = source_offset(bi, bext, bsrc, nb), dof = source_offset(bi, bext, bdst, nb);
    const int64_t i1 = std::min(np, i0 + kTile), j1 = std::min(nq, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i) {
      const float* s = src + so + i;
      float* d = dst + dof + i * dp;
      for (int64_t j = j0; j < j1; ++j) d[j] = s[j * sq];
    }
  }
}

}  // namespace tarn::kernels::cpu
