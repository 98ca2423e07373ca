#include "kernels/chunk_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tarn::kernels::cpu {
namespace {

float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t e = 0; e < d; ++e) s += a[e] * b[e];
  return s;
}

// Calls f(j) for each visible key of query row `i` of head `bh`, chunk by chunk in `chosen`'s order.
template <class F>
void for_each_key(const ChunkAttentionDims& s, const int32_t* chosen, const float* padded, int64_t bh, int64_t i,
                  F&& f) {
  const int32_t* ch = chosen + (bh * s.nq + i) * s.top;
  const float* pad = padded ? padded + (bh / s.heads) * s.nk : nullptr;
  for (int64_t t = 0; t < s.top; ++t) {
    if (ch[t] < 0) continue;
    const int64_t begin = ch[t] * s.chunk, end = std::min(s.nk, begin + s.chunk);
    for (int64_t j = begin; j < end; ++j)
      if (!pad || pad[j] == 0.0f) f(j);
  }
}

}  // namespace

void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const int32_t* chosen, const float* padded, float scale, float* out, float* lse) {
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
                              const int32_t* chosen, const float* padded, float scale, const float* out,
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
