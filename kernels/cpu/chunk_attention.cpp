#include "kernels/chunk_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace tarn::kernels::cpu {
namespace {

float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t e = 0; e < d; ++e) s += a[e] * b[e];
  return s;
}

// Visible rows of chunk c of batch row b.
int64_t visible_rows(const ChunkAttentionDims& s, const float* padded, int64_t b, int64_t c) {
  const int64_t begin = c * s.chunk, end = std::min(s.nk, begin + s.chunk);
  if (!padded) return end - begin;
  int64_t kept = 0;
  for (int64_t j = begin; j < end; ++j) kept += padded[b * s.nk + j] == 0.0f;
  return kept;
}

// Calls f(j) for each visible key of query row `i` of head `bh`, chunk by chunk in `chosen`'s order.
template <class F>
void for_each_key(const ChunkAttentionDims& s, const float* chosen, const float* padded, int64_t bh, int64_t i,
                  F&& f) {
  const float* ch = chosen + (bh * s.nq + i) * s.top;
  const float* pad = padded ? padded + (bh / s.heads) * s.nk : nullptr;
  for (int64_t t = 0; t < s.top; ++t) {
    if (ch[t] < 0) continue;
    const int64_t begin = static_cast<int64_t>(ch[t]) * s.chunk, end = std::min(s.nk, begin + s.chunk);
    for (int64_t j = begin; j < end; ++j)
      if (!pad || pad[j] == 0.0f) f(j);
  }
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
    std::vector<int32_t> order;  // a thread's candidates, reused row after row
    order.reserve(static_cast<size_t>(nc));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = scores + r * nc;
      const float* flags = empty ? empty + (r / (s.heads * s.nq)) * nc : nullptr;
      order.clear();
      for (int32_t c = 0; c < nc; ++c)
        if (!flags || flags[c] == 0.0f) order.push_back(c);
      const int64_t picked = std::min<int64_t>(s.top, static_cast<int64_t>(order.size()));
      // equal scores keep the earlier chunk
      std::partial_sort(order.begin(), order.begin() + picked, order.end(),
                        [&](int32_t x, int32_t y) { return row[x] > row[y] || (row[x] == row[y] && x < y); });
      for (int64_t t = 0; t < s.top; ++t) chosen[r * s.top + t] = t < picked ? static_cast<float>(order[t]) : -1.0f;
    }
  }
}

void chunk_choose_within(const ChunkAttentionDims& s, const float* q, const float* k, const float* parents,
                         const float* padded, float scale, int64_t pick, float* chosen) {
  const int64_t d = s.d, bhs = s.batch * s.heads;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < bhs; ++bh) {
    std::vector<std::pair<float, int64_t>> candidates;  // (score, row)
    for (int64_t i = 0; i < s.nq; ++i) {
      const float* qi = q + (bh * s.nq + i) * d;
      candidates.clear();
      for_each_key(s, parents, padded, bh, i,
                   [&](int64_t j) { candidates.emplace_back(scale * dot(qi, k + (bh * s.nk + j) * d, d), j); });
      const int64_t picked = std::min<int64_t>(pick, static_cast<int64_t>(candidates.size()));
      // equal scores keep the lower row, whatever order the parents came in
      std::partial_sort(candidates.begin(), candidates.begin() + picked, candidates.end(),
                        [](const auto& x, const auto& y) {
                          return x.first > y.first || (x.first == y.first && x.second < y.second);
                        });
      float* out = chosen + (bh * s.nq + i) * pick;
      for (int64_t t = 0; t < pick; ++t) out[t] = t < picked ? static_cast<float>(candidates[t].second) : -1.0f;
    }
  }
}

void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const float* chosen, const float* padded, float scale, float* out, float* lse) {
  const int64_t d = s.d, bhs = s.batch * s.heads;
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < bhs; ++bh) {
    // Distinct chunks (the op checks): at most nk keys, and at most top x chunk.
    std::vector<float> scores(static_cast<size_t>(std::min(s.nk, s.top * s.chunk)));
    const float *kh = k + bh * s.nk * d, *vh = v + bh * s.nk * d;
    for (int64_t i = 0; i < s.nq; ++i) {
      const float* qi = q + (bh * s.nq + i) * d;
      float* oi = out + (bh * s.nq + i) * d;
      std::fill(oi, oi + d, 0.0f);
      float m = -std::numeric_limits<float>::infinity();
      int64_t n = 0;
      for_each_key(s, chosen, padded, bh, i, [&](int64_t j) {
        scores[n] = scale * dot(qi, kh + j * d, d);
        m = std::max(m, scores[n++]);
      });
      if (n == 0) {
        lse[bh * s.nq + i] = -std::numeric_limits<float>::infinity();
        continue;
      }
      float z = 0.0f;
      n = 0;
      for_each_key(s, chosen, padded, bh, i, [&](int64_t j) {
        const float p = std::exp(scores[n++] - m);
        z += p;
        const float* vj = vh + j * d;
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) oi[e] += p * vj[e];
      });
      for (int64_t e = 0; e < d; ++e) oi[e] /= z;
      lse[bh * s.nq + i] = m + std::log(z);
    }
  }
}

void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                              const float* chosen, const float* padded, float scale, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const int64_t d = s.d, bhs = s.batch * s.heads;
  if (dq) std::fill(dq, dq + bhs * s.nq * d, 0.0f);
  if (dk) std::fill(dk, dk + bhs * s.nk * d, 0.0f);
  if (dv) std::fill(dv, dv + bhs * s.nk * d, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < bhs; ++bh) {
    const float *kh = k + bh * s.nk * d, *vh = v + bh * s.nk * d;
    for (int64_t i = 0; i < s.nq; ++i) {
      const float li = lse[bh * s.nq + i];
      if (std::isinf(li)) continue;  // no visible key: the zeros have no gradient
      const int64_t row = (bh * s.nq + i) * d;
      const float *qi = q + row, *gi = dout + row;
      const float di = dot(gi, out + row, d);  // Σ_j P_ij dP_ij
      for_each_key(s, chosen, padded, bh, i, [&](int64_t j) {
        const float* kj = kh + j * d;
        const float* vj = vh + j * d;
        const float p = std::exp(scale * dot(qi, kj, d) - li);
        const float ds = p * (dot(gi, vj, d) - di) * scale;
        if (dv) {
          float* dvj = dv + (bh * s.nk + j) * d;
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) dvj[e] += p * gi[e];
        }
        if (dq) {
          float* dqi = dq + row;
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) dqi[e] += ds * kj[e];
        }
        if (dk) {
          float* dkj = dk + (bh * s.nk + j) * d;
#pragma omp simd
          for (int64_t e = 0; e < d; ++e) dkj[e] += ds * qi[e];
        }
      });
    }
  }
}

}  // namespace tarn::kernels::cpu
