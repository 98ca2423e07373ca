// Routed cross-attention's reads of the chosen chunks, and the choice within them
// (kernels/chunk_attention.h; the landmarks are in chunk_landmarks.cpp), chunk-major: for a block
// of one head's queries, the (query, slot) pairs that name a chunk are grouped by chunk, and each
// chunk's keys and values are read once for all the queries that chose it, in small GEMMs on the
// tile GEMM of linear_attention_simd.h. Query by query (each query gathering its chunks, one dot
// and one libm exp per key), `tarn bench attention --algos routed_tree` took 2.05-2.35x as long
// forward and backward at 4,096-65,536 keys (docs/measurements.md, 2026-12-04).
#include "kernels/chunk_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/best_of.h"
#include "kernels/cpu/linear_attention_simd.h"
#include "kernels/cpu/softmax_row.h"

namespace tarn::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
std::atomic<int64_t> score_floats{ChunkTuning{}.score_floats};  // a block's scores, per thread
std::atomic<int64_t> tile_rows{ChunkTuning{}.tile_rows};        // queries per GEMM tile of a chunk

// One head's queries [i0, i0 + rows), their (query, slot) pairs grouped by the chunk the slot
// names: chunk c's pairs are visits[start[c], start[c + 1]), queries ascending within a chunk.
struct Visit {
  int32_t row;   // the query, from i0
  int32_t slot;  // its slot in `chosen`: where its scores go
};
struct ChunkVisits {
  std::vector<int64_t> start;
  std::vector<Visit> visits;

  void build(const float* chosen, int64_t rows, int64_t top, int64_t nc) {
    start.assign(static_cast<size_t>(nc + 1), 0);
    for (int64_t x = 0; x < rows * top; ++x)
      if (chosen[x] >= 0) ++start[static_cast<size_t>(chosen[x]) + 1];
    for (int64_t c = 0; c < nc; ++c) start[c + 1] += start[c];
    visits.resize(static_cast<size_t>(start[nc]));
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < top; ++t) {
        const float c = chosen[r * top + t];
        if (c >= 0) visits[next[static_cast<size_t>(c)]++] = {static_cast<int32_t>(r), static_cast<int32_t>(t)};
      }
  }
};

// A thread's buffers, sized once per call (for one query, as in decoding, they are small).
// Gathered rows are d_pad wide and their padding columns stay zero (only [0, d) is ever
// written), so they can serve as GEMM operands.
struct Work {
  int64_t d, d_pad, c_pad, top, block, tile;
  std::vector<float> rows_a, rows_b;  // tile x d_pad: gathered q, dout (backward)
  std::vector<float> tile_s, tile_ds;  // tile x c_pad: probabilities, their gradient (backward)
  std::vector<float> tile_out;        // tile x d_pad: a GEMM's rows before they are scattered
  std::vector<float> chunk_t;         // d x c_pad: a chunk's keys or values transposed
  std::vector<float> chunk_p;         // c_pad x d_pad: a chunk's keys or values, padded
  std::vector<float> grad_k, grad_v;  // c_pad x d_pad: a chunk's dk, dv from this block (backward)
  std::vector<float> scores;          // block x top x c_pad: each (query, slot)'s chunk row
  ChunkVisits lists;

  // A chunk holds at most nk rows, whatever `chunk` says (a recipe may set it to 2^31 - 1), and
  // a tile need not be taller than the block (its chunks' visits go through in tiles).
  Work(const ChunkAttentionDims& s, bool backward)
      : d(s.d), d_pad(simd::padded(s.d)), c_pad(simd::padded(std::max<int64_t>(1, std::min(s.chunk, s.nk)))),
        top(s.top) {
    block = std::max<int64_t>(1, std::min(s.nq, score_floats.load() / std::max<int64_t>(1, top * c_pad)));
    tile = std::min(tile_rows.load(), block);
    rows_a.assign(static_cast<size_t>(tile * d_pad), 0.0f);
    tile_out = rows_a;
    tile_s.assign(static_cast<size_t>(tile * c_pad), 0.0f);
    chunk_t.assign(static_cast<size_t>(d * c_pad), 0.0f);
    chunk_p.assign(static_cast<size_t>(c_pad * d_pad), 0.0f);
    if (backward) {
      rows_b = rows_a;
      tile_ds = tile_s;
      grad_k = grad_v = chunk_p;
    }
    scores.resize(static_cast<size_t>(block * top * c_pad));
  }
  float* score_row(int64_t row, int64_t slot) { return scores.data() + (row * top + slot) * c_pad; }
  bool named(int64_t c) const { return lists.start[c] < lists.start[c + 1]; }  // by a query of the block
};

// Calls f(visits, m) for chunk c's visits of the block, in query order, at most w.tile at a time.
template <class F>
void for_each_tile(const Work& w, int64_t c, F&& f) {
  const int64_t v0 = w.lists.start[c], v1 = w.lists.start[c + 1];
  for (int64_t t0 = v0; t0 < v1; t0 += w.tile) f(w.lists.visits.data() + t0, std::min(w.tile, v1 - t0));
}

// One head's source as the kernels see it.
struct Head {
  Head(const ChunkAttentionDims& s_, const float* padded, int64_t bh_)
      : s(s_), pad(padded ? padded + (bh_ / s_.heads) * s_.nk : nullptr), bh(bh_) {}
  const ChunkAttentionDims& s;
  const float* pad;  // this batch row's padding flags (nk), or null
  int64_t bh;
  int64_t begin(int64_t c) const { return c * s.chunk; }
  int64_t rows(int64_t c) const { return std::min(s.nk, begin(c) + s.chunk) - begin(c); }
  bool hidden(int64_t j) const { return pad && pad[j] != 0.0f; }
};

// Copies rows[x] of src (row stride d) for the visits [v, v + m) into dst (row stride d_pad).
void gather(const Work& w, const float* src, int64_t i0, const Visit* v, int64_t m, float* dst) {
  for (int64_t x = 0; x < m; ++x)
    std::memcpy(dst + x * w.d_pad, src + (i0 + v[x].row) * w.d, static_cast<size_t>(w.d) * sizeof(float));
}

// dst rows (row stride d) of the visits += tile rows (row stride d_pad).
void scatter_add(const Work& w, const float* tile, int64_t i0, const Visit* v, int64_t m, float* dst) {
  for (int64_t x = 0; x < m; ++x) {
    float* row = dst + (i0 + v[x].row) * w.d;
    const float* t = tile + x * w.d_pad;
    for (int64_t e = 0; e < w.d; ++e) row[e] += t[e];
  }
}

// A chunk's rows (keys or values of head h) as a c_pad x d_pad operand, rows past the chunk zero.
void load_chunk(Work& w, const Head& h, const float* x, int64_t c) {
  const int64_t n = h.rows(c);
  simd::copy_padded(x + (h.bh * h.s.nk + h.begin(c)) * w.d, n, w.d, w.d, w.chunk_p.data(), w.d_pad, w.d_pad);
  simd::zero_rows(w.chunk_p.data(), n, w.c_pad, w.d_pad, w.d_pad);
}

// The same rows transposed, d x c_pad, columns past the chunk zero.
void load_chunk_transposed(Work& w, const Head& h, const float* x, int64_t c) {
  simd::transpose(x + (h.bh * h.s.nk + h.begin(c)) * w.d, h.rows(c), w.d, w.d, w.chunk_t.data(), w.c_pad, w.c_pad);
}

// Every (query, slot)'s scores for the queries [i0, i0 + rows) of head h: scale q·k for its
// chunk's rows, -inf for padded rows, rows past the chunk and slots naming no chunk (-1).
// `chosen` is the block's first row of slots. Builds w.lists on the way.
void score_block(Work& w, const Head& h, const float* q, const float* k, const float* chosen, int64_t i0,
                 int64_t rows, float scale) {
  const int64_t nc = h.s.chunks();
  w.lists.build(chosen, rows, w.top, nc);
  std::fill(w.scores.begin(), w.scores.begin() + rows * w.top * w.c_pad, kNegInf);
  const float* qh = q + h.bh * h.s.nq * w.d;
  for (int64_t c = 0; c < nc; ++c) {
    if (!w.named(c)) continue;
    load_chunk_transposed(w, h, k, c);
    const int64_t n = h.rows(c), j0 = h.begin(c);
    for_each_tile(w, c, [&](const Visit* v, int64_t m) {
      gather(w, qh, i0, v, m, w.rows_a.data());
      simd::gemm(m, w.c_pad, w.d, simd::rows_of(w.rows_a.data(), w.d_pad), w.chunk_t.data(), w.c_pad,
                 w.tile_s.data(), w.c_pad, false);
      for (int64_t x = 0; x < m; ++x) {
        float* dst = w.score_row(v[x].row, v[x].slot);
        const float* src = w.tile_s.data() + x * w.c_pad;
        for (int64_t j = 0; j < n; ++j) dst[j] = h.hidden(j0 + j) ? kNegInf : scale * src[j];
      }
    });
  }
}

// Gathers the (query, slot) rows of w.scores for the visits into tile (m x c_pad).
void gather_scores(Work& w, const Visit* v, int64_t m, float* tile) {
  for (int64_t x = 0; x < m; ++x)
    std::memcpy(tile + x * w.c_pad, w.score_row(v[x].row, v[x].slot), static_cast<size_t>(w.c_pad) * sizeof(float));
}

// One step down a tree from the block's scores (before the softmax overwrites them): for each
// query of the block, the best `pick` visible rows of its chunks into picked (rows x pick).
void choose_within(Work& w, const Head& h, const float* parents, int64_t rows, BestOf& best, float* picked) {
  for (int64_t r = 0; r < rows; ++r) {
    best.clear();
    for (int64_t t = 0; t < w.top; ++t) {
      const float c = parents[r * w.top + t];
      if (c < 0) continue;
      const int64_t j0 = h.begin(static_cast<int64_t>(c)), n = h.rows(static_cast<int64_t>(c));
      const float* sc = w.score_row(r, t);
      for (int64_t j = 0; j < n; ++j)
        if (!h.hidden(j0 + j)) best.offer(sc[j], j0 + j);
    }
    best.write(picked + r * best.size());
  }
}

}  // namespace

ChunkTuning set_chunk_tuning(ChunkTuning t) {
  return {score_floats.exchange(std::max<int64_t>(1, t.score_floats)),
          tile_rows.exchange(std::max<int64_t>(1, t.tile_rows))};
}

void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const float* chosen, const float* padded, float scale, float* out, float* lse,
                             int64_t pick, float* picked) {
  const int64_t d = s.d, bhs = s.batch * s.heads, nc = s.chunks();
#pragma omp parallel
  {
    Work w(s, false);
    BestOf best(picked ? pick : 0);
    std::vector<float> inv_z(static_cast<size_t>(w.block));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < bhs; ++bh) {
      const Head h(s, padded, bh);
      float* oh = out + bh * s.nq * d;
      for (int64_t i0 = 0; i0 < s.nq; i0 += w.block) {
        const int64_t rows = std::min(w.block, s.nq - i0), width = s.top * w.c_pad;
        const float* parents = chosen + (bh * s.nq + i0) * s.top;
        score_block(w, h, q, k, parents, i0, rows, scale);
        if (picked) choose_within(w, h, parents, rows, best, picked + (bh * s.nq + i0) * pick);
        // Each query's softmax over all its slots at once: P = exp(s - max), its sum z.
        for (int64_t r = 0; r < rows; ++r) {
          float* row = w.score_row(r, 0);
          const float m = row::max(row, width);
          float& l = lse[bh * s.nq + i0 + r];
          std::fill(oh + (i0 + r) * d, oh + (i0 + r + 1) * d, 0.0f);
          if (m == kNegInf) {  // no visible key: zeros
            std::fill(row, row + width, 0.0f);
            l = kNegInf;
            inv_z[r] = 0.0f;
            continue;
          }
          simd::exp_shifted(row, m, row, width);
          const float z = simd::sum(row, width);
          l = m + std::log(z);
          inv_z[r] = 1.0f / z;
        }
        // out += P V, chunk by chunk, then / z.
        for (int64_t c = 0; c < nc; ++c) {
          if (!w.named(c)) continue;
          load_chunk(w, h, v, c);
          for_each_tile(w, c, [&](const Visit* vis, int64_t m) {
            gather_scores(w, vis, m, w.tile_s.data());
            simd::gemm(m, w.d_pad, h.rows(c), simd::rows_of(w.tile_s.data(), w.c_pad), w.chunk_p.data(), w.d_pad,
                       w.tile_out.data(), w.d_pad, false);
            scatter_add(w, w.tile_out.data(), i0, vis, m, oh);
          });
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < d; ++e) oh[(i0 + r) * d + e] *= inv_z[r];
      }
    }
  }
}

void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                              const float* chosen, const float* padded, float scale, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const int64_t d = s.d, bhs = s.batch * s.heads, nc = s.chunks();
  if (dq) std::fill(dq, dq + bhs * s.nq * d, 0.0f);
  if (dk) std::fill(dk, dk + bhs * s.nk * d, 0.0f);
  if (dv) std::fill(dv, dv + bhs * s.nk * d, 0.0f);
  if (!dq && !dk && !dv) return;
#pragma omp parallel
  {
    Work w(s, true);
    std::vector<float> delta(static_cast<size_t>(w.block));  // Σ_j P_ij dP_ij = dout_i · out_i
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < bhs; ++bh) {
      const Head h(s, padded, bh);
      const float *qh = q + bh * s.nq * d, *gh = dout + bh * s.nq * d;
      for (int64_t i0 = 0; i0 < s.nq; i0 += w.block) {
        const int64_t rows = std::min(w.block, s.nq - i0), width = s.top * w.c_pad;
        score_block(w, h, q, k, chosen + (bh * s.nq + i0) * s.top, i0, rows, scale);
        for (int64_t r = 0; r < rows; ++r) {  // P = exp(s - lse); none where no key was visible
          float* row = w.score_row(r, 0);
          const int64_t i = bh * s.nq + i0 + r;
          if (std::isinf(lse[i])) {
            std::fill(row, row + width, 0.0f);
            delta[r] = 0.0f;
            continue;
          }
          simd::exp_shifted(row, lse[i], row, width);
          delta[r] = simd::dot(dout + i * d, out + i * d, d);
        }
        for (int64_t c = 0; c < nc; ++c) {
          if (!w.named(c)) continue;
          const int64_t n = h.rows(c), j0 = bh * s.nk + h.begin(c);
          load_chunk_transposed(w, h, v, c);  // V^T for dP = dout V^T
          if (dq) load_chunk(w, h, k, c);     // K for dq = dS K
          std::fill(w.grad_k.begin(), w.grad_k.end(), 0.0f);
          std::fill(w.grad_v.begin(), w.grad_v.end(), 0.0f);
          for_each_tile(w, c, [&](const Visit* vis, int64_t m) {
            float *p = w.tile_s.data(), *ds = w.tile_ds.data();
            gather_scores(w, vis, m, p);
            gather(w, gh, i0, vis, m, w.rows_b.data());
            simd::gemm(m, w.c_pad, d, simd::rows_of(w.rows_b.data(), w.d_pad), w.chunk_t.data(), w.c_pad, ds,
                       w.c_pad, false);
            for (int64_t x = 0; x < m; ++x) {  // dS = P (dP - delta) scale
              const float dx = delta[vis[x].row];
              for (int64_t j = 0; j < w.c_pad; ++j)
                ds[x * w.c_pad + j] = p[x * w.c_pad + j] * (ds[x * w.c_pad + j] - dx) * scale;
            }
            if (dv)  // dV += P^T dout, the queries in order
              simd::gemm(n, w.d_pad, m, simd::transpose_of(p, w.c_pad), w.rows_b.data(), w.d_pad,
                         w.grad_v.data(), w.d_pad, true);
            if (dk) {  // dK += dS^T q
              gather(w, qh, i0, vis, m, w.rows_a.data());
              simd::gemm(n, w.d_pad, m, simd::transpose_of(ds, w.c_pad), w.rows_a.data(), w.d_pad,
                         w.grad_k.data(), w.d_pad, true);
            }
            if (dq) {  // dq = dS K
              simd::gemm(m, w.d_pad, n, simd::rows_of(ds, w.c_pad), w.chunk_p.data(), w.d_pad,
                         w.tile_out.data(), w.d_pad, false);
              scatter_add(w, w.tile_out.data(), i0, vis, m, dq + bh * s.nq * d);
            }
          });
          for (int64_t j = 0; j < n; ++j)
            for (int64_t e = 0; e < d; ++e) {
              if (dk) dk[(j0 + j) * d + e] += w.grad_k[j * w.d_pad + e];
              if (dv) dv[(j0 + j) * d + e] += w.grad_v[j * w.d_pad + e];
            }
        }
      }
    }
  }
}

}  // namespace tarn::kernels::cpu
