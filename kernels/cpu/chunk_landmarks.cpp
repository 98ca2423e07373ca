// The landmarks of routed cross-attention (kernels/chunk_attention.h): each chunk's mean and the
// choice of the best chunks by their scores. The reads of the chosen chunks, and the choice within
// them, are in chunk_attention.cpp.
#include <algorithm>

#include "kernels/chunk_attention.h"
#include "kernels/cpu/best_of.h"

namespace tarn::kernels::cpu {
namespace {

// Visible rows of chunk c of batch row b.
int64_t visible_rows(const ChunkAttentionDims& s, const float* padded, int64_t b, int64_t c) {
  const int64_t begin = c * s.chunk, end = std::min(s.nk, begin + s.chunk);
  if (!padded) return end - begin;
  int64_t kept = 0;
  for (int64_t j = begin; j < end; ++j) kept += padded[b * s.nk + j] == 0.0f;
  return kept;
}

}  // namespace

void chunk_mean_forward(const ChunkAttentionDims& s, const float* x, const float* padded, float* mean, float* empty) {
  const int64_t d = s.d, nc = s.chunks(), bhs = s.batch * s.heads;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t c = 0; c < nc; ++c) empty[b * nc + c] = visible_rows(s, padded, b, c) == 0 ? 1.0f : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < bhs; ++bh)
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t b = bh / s.heads, kept = visible_rows(s, padded, b, c);
      float* m = mean + (bh * nc + c) * d;
      std::fill(m, m + d, 0.0f);
      for (int64_t j = c * s.chunk; j < std::min(s.nk, (c + 1) * s.chunk); ++j) {
        if (padded && padded[b * s.nk + j] != 0.0f) continue;
        const float* xj = x + (bh * s.nk + j) * d;
        for (int64_t e = 0; e < d; ++e) m[e] += xj[e];
      }
      if (kept > 0)
        for (int64_t e = 0; e < d; ++e) m[e] /= static_cast<float>(kept);
    }
}

void chunk_mean_backward(const ChunkAttentionDims& s, const float* padded, const float* dmean, float* dx) {
  const int64_t d = s.d, nc = s.chunks(), bhs = s.batch * s.heads;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < bhs; ++bh)
    for (int64_t j = 0; j < s.nk; ++j) {
      const int64_t b = bh / s.heads, c = j / s.chunk;
      float* g = dx + (bh * s.nk + j) * d;
      const bool hidden = padded && padded[b * s.nk + j] != 0.0f;
      const float* dm = dmean + (bh * nc + c) * d;
      const float kept = hidden ? 0.0f : static_cast<float>(visible_rows(s, padded, b, c));
      for (int64_t e = 0; e < d; ++e) g[e] = hidden ? 0.0f : dm[e] / kept;
    }
}

void chunk_choose(const ChunkAttentionDims& s, const float* scores, const float* empty, float* chosen) {
  const int64_t nc = s.chunks(), rows = s.batch * s.heads * s.nq;
#pragma omp parallel
  {
    BestOf best(s.top);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = scores + r * nc;
      const float* flags = empty ? empty + (r / (s.heads * s.nq)) * nc : nullptr;
      best.clear();
      for (int64_t c = 0; c < nc; ++c)
        if (!flags || flags[c] == 0.0f) best.offer(row[c], c);
      best.write(chosen + r * s.top);
    }
  }
}

}  // namespace tarn::kernels::cpu
