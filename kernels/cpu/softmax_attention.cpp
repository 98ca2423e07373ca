// Blocked softmax attention on the CPU (FlashAttention-style online softmax; entry points and
// shapes in kernels/softmax_attention.h).
//
// Per thread, for a block of r <= Bq queries and c <= Bk keys (padded to the SIMD width):
//   kt = K_blk^T: d x Bkp   s, ds: Bq x Bkp   vp: Bk x ep   acc: Bq x ep
// and in backward also kp (Bk x dp), vt (e x Bkp), qp (Bq x dp), dop (Bq x ep), dk/dv
// accumulators (Bk x dp, Bk x ep), a dq tile (Bq x dp) and D_i = dO_i . O_i (Nq).
#include "kernels/softmax_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "kernels/cpu/linear_attention_simd.h"

namespace tarn::kernels::cpu {

using simd::Arena;
using simd::gemm;
using simd::padded;
using simd::rows_of;
using simd::transpose_of;

namespace {

constexpr float kInf = __builtin_inff();

struct Geometry {
  int64_t batch, heads, n_q, n_k, d, e;
  int64_t bq, bk;            // block rows, clamped to the sequence lengths
  int64_t dp, ep, bqp, bkp;  // padded to the SIMD width
  float scale;
  bool causal;
  int64_t window;
  KeyRange keys_of(int64_t i) const { return visible_keys(i, n_k, causal, window); }
};

Geometry make_geometry(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg) {
  Geometry g{};
  g.batch = dims.batch, g.heads = dims.heads, g.n_q = dims.n_q, g.n_k = dims.n_k;
  g.d = dims.d, g.e = dims.e;
  const int block = default_softmax_block(cfg.window);
  g.bq = std::max<int64_t>(1, std::min<int64_t>(cfg.block_q > 0 ? cfg.block_q : block, dims.n_q));
  g.bk = std::max<int64_t>(1, std::min<int64_t>(cfg.block_k > 0 ? cfg.block_k : block, dims.n_k));
  g.dp = padded(g.d), g.ep = padded(g.e), g.bqp = padded(g.bq), g.bkp = padded(g.bk);
  g.scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(static_cast<float>(dims.d));
  g.causal = cfg.causal;
  g.window = cfg.window;
  return g;
}

void check_args(const char* op, const SoftmaxAttentionDims& dims,
                const SoftmaxAttentionConfig& cfg) {
  TARN_ASSERT(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
              ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q,
              ", Nk=", dims.n_k, ")");
  TARN_ASSERT(dims.d > 0 && dims.e > 0, op, ": d=", dims.d, " and e=", dims.e,
              " must be positive");
  TARN_ASSERT(!cfg.causal || dims.n_q == dims.n_k, op,
              ": causal attention needs Nq == Nk, got Nq=", dims.n_q, " Nk=", dims.n_k);
  TARN_ASSERT(cfg.block_q >= 0 && cfg.block_k >= 0, op,
              ": block sizes must be 0 (the kernel's choice) or positive, got ", cfg.block_q, " x ", cfg.block_k);
  TARN_ASSERT(cfg.window >= 0, op, ": window must be >= 0, got ", cfg.window);
}

enum class Pass { forward, backward };

struct Buffers {
  float *kt, *s, *vp, *acc, *m, *l;                       // forward
  float *kp, *vt, *ds, *qp, *dop, *dk, *dv, *dq, *dvec;  // backward
  Buffers(Arena& ar, const Geometry& g, Pass pass) {
    const bool bwd = pass == Pass::backward;
    kt = ar.take(g.d * g.bkp);
    s = ar.take(g.bq * g.bkp);
    vp = ar.take(g.bk * g.ep);
    acc = bwd ? nullptr : ar.take(g.bq * g.ep);
    m = bwd ? nullptr : ar.take(g.bq);
    l = bwd ? nullptr : ar.take(g.bq);
    kp = bwd ? ar.take(g.bk * g.dp) : nullptr;
    vt = bwd ? ar.take(g.e * g.bkp) : nullptr;
    ds = bwd ? ar.take(g.bq * g.bkp) : nullptr;
    qp = bwd ? ar.take(g.bq * g.dp) : nullptr;
    dop = bwd ? ar.take(g.bq * g.ep) : nullptr;
    dk = bwd ? ar.take(g.bk * g.dp) : nullptr;
    dv = bwd ? ar.take(g.bk * g.ep) : nullptr;
    dq = bwd ? ar.take(g.bq * g.dp) : nullptr;
    dvec = bwd ? ar.take(g.n_q) : nullptr;
  }
};

int64_t per_thread_floats(const Geometry& g, Pass pass) {
  Arena counter(nullptr);
  Buffers unused(counter, g, pass);
  return counter.used();
}

// s (r x bkp) = scale * q_blk k_blk^T with invisible entries at -inf: padded keys, columns
// past the block, and keys outside the query's causal or window range.
void scores(const Geometry& g, const float* q, const float* pad, int64_t i0, int64_t r, int64_t j0,
            int64_t c, const float* kt, float* s) {
  const int64_t cp = padded(c);
  gemm(r, cp, g.d, rows_of(q + i0 * g.d, g.d), kt, g.bkp, s, g.bkp, false);
  for (int64_t i = 0; i < r; ++i) {
    float* row = s + i * g.bkp;
    const KeyRange keys = g.keys_of(i0 + i);  // block columns [lo, hi) are visible
    const int64_t lo = std::clamp<int64_t>(keys.begin - j0, 0, c);
    const int64_t hi = std::clamp<int64_t>(keys.end - j0, lo, c);
    std::fill(row, row + lo, -kInf);
    for (int64_t j = lo; j < hi; ++j)
      row[j] = (pad && pad[j0 + j] != 0.0f) ? -kInf : row[j] * g.scale;
    std::fill(row + hi, row + cp, -kInf);
  }
}

// The key blocks [first, end) a query block [i0, i0 + r) can see.
KeyRange key_blocks_for(const Geometry& g, int64_t i0, int64_t r) {
  const KeyRange keys = keys_of_block(i0, r, g.n_q, g.n_k, g.causal, g.window);
  if (keys.end <= keys.begin) return {0, 0};
  return {keys.begin / g.bk, (keys.end + g.bk - 1) / g.bk};
}

void forward_block(const Geometry& g, const SoftmaxAttentionConfig& cfg, const float* q,
                   const float* k, const float* v, const float* pad, int64_t i0, float* out,
                   float* lse, const Buffers& w) {
  const int64_t r = std::min(g.bq, g.n_q - i0);
  std::fill(w.m, w.m + r, -kInf);
  std::fill(w.l, w.l + r, 0.0f);
  std::fill(w.acc, w.acc + r * g.ep, 0.0f);
  const KeyRange blocks = key_blocks_for(g, i0, r);
  for (int64_t kb = blocks.begin; kb < blocks.end; ++kb) {
    const int64_t j0 = kb * g.bk, c = std::min(g.bk, g.n_k - j0), cp = padded(c);
    simd::transpose(k + j0 * g.d, c, g.d, g.d, w.kt, g.bkp, cp);
    scores(g, q, pad, i0, r, j0, c, w.kt, w.s);
    // Online softmax: rescale what was accumulated under the old row max.
    for (int64_t i = 0; i < r; ++i) {
      float* row = w.s + i * g.bkp;
      const float m_new = std::max(w.m[i], *std::max_element(row, row + cp));
      if (m_new == -kInf) {  // nothing visible yet: p = 0
        std::fill(row, row + cp, 0.0f);
        continue;
      }
      const float alpha = simd::exp(w.m[i] - m_new);  // 0 when m was -inf
      simd::exp_shifted(row, m_new, row, cp);
      float sum = 0.0f;
      for (int64_t j = 0; j < cp; ++j) sum += row[j];
      w.l[i] = w.l[i] * alpha + sum;
      w.m[i] = m_new;
      float* acc = w.acc + i * g.ep;
      for (int64_t x = 0; x < g.ep; ++x) acc[x] *= alpha;
    }
    const float* vb = v + j0 * g.e;
    if (g.e != g.ep) {
      simd::copy_padded(vb, c, g.e, g.e, w.vp, g.ep, g.ep);
      vb = w.vp;
    }
    gemm(r, g.ep, c, rows_of(w.s, g.bkp), vb, g.ep, w.acc, g.ep, true);
  }
  for (int64_t i = 0; i < r; ++i) {
    const bool empty = w.l[i] == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / w.l[i];
    for (int64_t x = 0; x < g.e; ++x) out[(i0 + i) * g.e + x] = w.acc[i * g.ep + x] * inv;
    lse[i0 + i] = empty ? kInf : w.m[i] + std::log(w.l[i]);
  }
}

// FlashAttention-2 backward for one (batch, head): key blocks outermost so that dK, dV
// accumulate in registers-sized tiles; dQ accumulates in place across key blocks.
void backward_slice(const Geometry& g, const SoftmaxAttentionConfig& cfg, const float* q,
                    const float* k, const float* v, const float* out, const float* lse,
                    const float* dout, const float* pad, float* dq, float* dk, float* dv,
                    const Buffers& w) {
  for (int64_t i = 0; i < g.n_q; ++i) {  // D_i = dO_i . O_i = sum_j P_ij dP_ij
    float acc = 0.0f;
    for (int64_t x = 0; x < g.e; ++x) acc += dout[i * g.e + x] * out[i * g.e + x];
    w.dvec[i] = acc;
  }
  if (dq) std::fill(dq, dq + g.n_q * g.d, 0.0f);
  const int64_t key_blocks = (g.n_k + g.bk - 1) / g.bk;
  for (int64_t kb = 0; kb < key_blocks; ++kb) {
    const int64_t j0 = kb * g.bk, c = std::min(g.bk, g.n_k - j0), cp = padded(c);
    simd::transpose(k + j0 * g.d, c, g.d, g.d, w.kt, g.bkp, cp);
    simd::transpose(v + j0 * g.e, c, g.e, g.e, w.vt, g.bkp, cp);
    simd::copy_padded(k + j0 * g.d, c, g.d, g.d, w.kp, g.dp, g.dp);
    std::fill(w.dk, w.dk + c * g.dp, 0.0f);
    std::fill(w.dv, w.dv + c * g.ep, 0.0f);
    // Only the query blocks that see some key of this block (causal, window).
    const KeyRange queries = queries_of_block(j0, c, g.n_q, g.n_k, g.causal, g.window);
    for (int64_t i0 = queries.begin / g.bq * g.bq; i0 < queries.end; i0 += g.bq) {
      const int64_t r = std::min(g.bq, g.n_q - i0);
      scores(g, q, pad, i0, r, j0, c, w.kt, w.s);
      for (int64_t i = 0; i < r; ++i) {  // P = exp(S - lse): 0 where invisible or lse = inf
        float* row = w.s + i * g.bkp;
        simd::exp_shifted(row, lse[i0 + i], row, cp);
      }
      simd::copy_padded(dout + i0 * g.e, r, g.e, g.e, w.dop, g.ep, g.ep);
      // dV += P^T dO
      gemm(c, g.ep, r, transpose_of(w.s, g.bkp), w.dop, g.ep, w.dv, g.ep, true);
      // dP = dO V^T;  dS = P o (dP - D) * scale
      gemm(r, cp, g.e, rows_of(dout + i0 * g.e, g.e), w.vt, g.bkp, w.ds, g.bkp, false);
      for (int64_t i = 0; i < r; ++i) {
        const float* p = w.s + i * g.bkp;
        float* ds = w.ds + i * g.bkp;
        const float di = w.dvec[i0 + i];
        for (int64_t j = 0; j < cp; ++j) ds[j] = p[j] * (ds[j] - di) * g.scale;
      }
      // dQ += dS K;  dK += dS^T Q
      if (dq) {
        gemm(r, g.dp, c, rows_of(w.ds, g.bkp), w.kp, g.dp, w.dq, g.dp, false);
        for (int64_t i = 0; i < r; ++i)
          for (int64_t x = 0; x < g.d; ++x) dq[(i0 + i) * g.d + x] += w.dq[i * g.dp + x];
      }
      simd::copy_padded(q + i0 * g.d, r, g.d, g.d, w.qp, g.dp, g.dp);
      gemm(c, g.dp, r, transpose_of(w.ds, g.bkp), w.qp, g.dp, w.dk, g.dp, true);
    }
    if (dk) simd::copy_padded(w.dk, c, g.d, g.dp, dk + j0 * g.d, g.d, g.d);
    if (dv) simd::copy_padded(w.dv, c, g.e, g.ep, dv + j0 * g.e, g.e, g.e);
  }
}

// Threads worth using for `items` work items: one for tiny problems (gradient checks,
// short sentences). The workspace queries size for this many.
int planned_threads(const Geometry& g, int64_t items) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 16;  // multiply-adds
  const int64_t work = g.batch * g.heads * g.n_q * g.n_k * (g.d + g.e);
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({omp_get_max_threads(), items, work / kMinWorkPerThread})));
}

int64_t forward_items(const Geometry& g) { return g.batch * g.heads * ((g.n_q + g.bq - 1) / g.bq); }
int64_t backward_items(const Geometry& g) { return g.batch * g.heads; }

template <class Fn>
void parallel_items(const char* op, const Geometry& g, Pass pass, int64_t items,
                    float* workspace, size_t workspace_floats, Fn fn) {
  if (items == 0) return;
  const int64_t per_thread = per_thread_floats(g, pass);
  const int64_t fits = static_cast<int64_t>(workspace_floats) / per_thread;
  TARN_ASSERT(workspace && fits >= 1, op, ": workspace of ", workspace_floats,
              " floats is smaller than one thread's ", per_thread);
  const int threads = static_cast<int>(std::min<int64_t>(planned_threads(g, items), fits));
#pragma omp parallel num_threads(threads)
  {
    Arena arena(workspace + omp_get_thread_num() * per_thread);
    const Buffers w(arena, g, pass);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) fn(it, w);
  }
}

// One pass's workspace: a slice of per_thread_floats for each thread it will run on.
size_t workspace_floats(const char* what, const SoftmaxAttentionDims& dims,
                        const SoftmaxAttentionConfig& cfg, Pass pass) {
  check_args(what, dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  const int64_t items = pass == Pass::forward ? forward_items(g) : backward_items(g);
  return static_cast<size_t>(per_thread_floats(g, pass) * planned_threads(g, items));
}

}  // namespace

size_t softmax_attention_forward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                  const SoftmaxAttentionConfig& cfg) {
  return workspace_floats("softmax_attention_forward", dims, cfg, Pass::forward);
}

size_t softmax_attention_backward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                   const SoftmaxAttentionConfig& cfg) {
  return workspace_floats("softmax_attention_backward", dims, cfg, Pass::backward);
}

void softmax_attention_forward(const SoftmaxAttentionDims& dims,
                               const SoftmaxAttentionConfig& cfg, const float* q,
                               const float* k, const float* v, float* out, float* lse,
                               float* workspace, size_t workspace_floats) {
  check_args("softmax_attention_forward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  const int64_t slices = g.batch * g.heads, q_blocks = (g.n_q + g.bq - 1) / g.bq;
  // Causal blocks late in the sequence cost the most: hand them out first.
  parallel_items("softmax_attention_forward", g, Pass::forward, forward_items(g), workspace,
                 workspace_floats, [&](int64_t it, const Buffers& w) {
                   const int64_t bh = it % slices, qb = q_blocks - 1 - it / slices;
                   const float* pad =
                       cfg.key_padding_mask ? cfg.key_padding_mask + (bh / g.heads) * g.n_k : nullptr;
                   forward_block(g, cfg, q + bh * g.n_q * g.d, k + bh * g.n_k * g.d,
                                 v + bh * g.n_k * g.e, pad, qb * g.bq, out + bh * g.n_q * g.e,
                                 lse + bh * g.n_q, w);
                 });
}

void softmax_attention_backward(const SoftmaxAttentionDims& dims,
                                const SoftmaxAttentionConfig& cfg, const float* q,
                                const float* k, const float* v, const float* out,
                                const float* lse, const float* dout, float* dq, float* dk,
                                float* dv, float* workspace, size_t workspace_floats) {
  check_args("softmax_attention_backward", dims, cfg);
  const Geometry g = make_geometry(dims, cfg);
  if (!dq && !dk && !dv) return;
  parallel_items("softmax_attention_backward", g, Pass::backward, backward_items(g), workspace,
                 workspace_floats, [&](int64_t bh, const Buffers& w) {
                   const float* pad =
                       cfg.key_padding_mask ? cfg.key_padding_mask + (bh / g.heads) * g.n_k : nullptr;
                   backward_slice(g, cfg, q + bh * g.n_q * g.d, k + bh * g.n_k * g.d,
                                  v + bh * g.n_k * g.e, out + bh * g.n_q * g.e, lse + bh * g.n_q,
                                  dout + bh * g.n_q * g.e, pad, dq ? dq + bh * g.n_q * g.d : nullptr,
                                  dk ? dk + bh * g.n_k * g.d : nullptr,
                                  dv ? dv + bh * g.n_k * g.e : nullptr, w);
                 });
}

double softmax_attention_flops(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg,
                               bool backward) {
  double pairs = 0;
  for (int64_t i = 0; i < dims.n_q; ++i) {
    const KeyRange keys = visible_keys(i, dims.n_k, cfg.causal, cfg.window);
    pairs += double(std::max<int64_t>(0, keys.end - keys.begin));
  }
  const double fwd = 2.0 * pairs * double(dims.d + dims.e) * double(dims.batch * dims.heads);
  return backward ? 2.5 * fwd : fwd;
}

}  // namespace tarn::kernels::cpu
