// The gated delta rule's chunked (WY) form on the CPU (kernels/cpu/delta_rule_chunked.h). For a
// chunk of L tokens starting from the state S0, with D_ts = prod_{s < r <= t} alpha_r (D_{t,-1}
// = b_t, e_s = D_{L-1,s}):
//   W   = X (V - diag(b) K S0),  X = (I + A)^-1 diag(beta),  A_ts = beta_t D_ts k_t . k_s (s < t)
//   out = diag(b) Q S0 + (D o Q K^T)_{s <= t} W,   S_L = b_{L-1} S0 + K^T diag(e) W
// and the backward of kernels/cuda/delta_rule_chunked.cu's header, term for term.
//
// Why on the CPU. The recurrence costs 6 d^2 FLOPs a token forward and 21 d^2 backward whatever
// the length; the chunked form's d^2 terms all involve S0 or the incoming dS, which are zero for
// the first chunk and for the last one of a sequence read out token by token (no d_final_state).
// At the main job's 13-18-token glosses a sequence is one chunk, and what is left are the chunk's
// L x L products: about 10 L d FLOPs a token, a few times less than the recurrence's 27 d^2.
// Over many chunks the d^2 terms are matrix products of L x d and d x d operands, which run on
// the attention kernels' register-tiled GEMM (kernels/cpu/linear_attention_simd.h); only the
// triangular substitutions and the decays' O(L^3) sums are plain loops. Every buffer's rows are
// padded to whole vectors (the GEMM's column count must be), the padding kept zero.
#include "kernels/cpu/delta_rule_chunked.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/linear_attention_simd.h"

namespace tarn::kernels::cpu::delta_chunked {
namespace {

using simd::gemm;
using simd::padded;
using simd::rows_of;
using simd::transpose_of;
using simd::Tri;

// A thread's buffers for chunks of at most c tokens: rows of width dkp = padded(dk) (keys,
// queries and their gradients), dvp = padded(dv) (values, writes, output gradients) or cp =
// padded(c) (the chunk's L x L matrices), columns past the real width zero.
struct Buffers {
  int64_t c, dk, dv, dkp, dvp, cp;
  float *s0, *ds, *s0t, *dst;                          // state and its gradient (dk x dvp), transposed (dv x dkp)
  float *kc, *qc, *kt, *ke, *kq, *dqc, *dkc, *tk;      // c x dkp (kt: dk x cp)
  float *r, *w, *wt, *dout, *dy, *ks0, *qs0, *kds;     // c x dvp (wt: dv x cp)
  float *kk, *qk, *a, *x, *p, *da, *dp, *sym;          // c x cp
  float *d, *g, *de;                                   // c x (c + 1), c
  float& D(int64_t t, int64_t s) const { return d[t * (c + 1) + s + 1]; }  // -1 <= s <= t
  float& G(int64_t t, int64_t s) const { return g[t * (c + 1) + s + 1]; }

  static int64_t floats(int64_t c, int64_t dk, int64_t dv) {
    simd::Arena arena(nullptr);
    carve(arena, c, dk, dv, nullptr);
    return arena.used();
  }
  Buffers(float* base, int64_t c_, int64_t dk_, int64_t dv_) {
    simd::Arena arena(base);
    carve(arena, c_, dk_, dv_, this);
    std::fill(base, base + arena.used(), 0.0f);  // the padding stays zero from here on
  }

 private:
  static void carve(simd::Arena& arena, int64_t c, int64_t dk, int64_t dv, Buffers* m) {
    const int64_t dkp = padded(dk), dvp = padded(dv), cp = padded(c);
    Buffers scratch{};
    Buffers& b = m != nullptr ? *m : scratch;
    b.c = c, b.dk = dk, b.dv = dv, b.dkp = dkp, b.dvp = dvp, b.cp = cp;
    for (float** f : {&b.s0, &b.ds}) *f = arena.take(dk * dvp);
    for (float** f : {&b.s0t, &b.dst}) *f = arena.take(dv * dkp);
    for (float** f : {&b.kc, &b.qc, &b.ke, &b.kq, &b.dqc, &b.dkc, &b.tk}) *f = arena.take(c * dkp);
    b.kt = arena.take(dk * cp);
    for (float** f : {&b.r, &b.w, &b.dout, &b.dy, &b.ks0, &b.qs0, &b.kds}) *f = arena.take(c * dvp);
    b.wt = arena.take(dv * cp);
    for (float** f : {&b.kk, &b.qk, &b.a, &b.x, &b.p, &b.da, &b.dp, &b.sym}) *f = arena.take(c * cp);
    for (float** f : {&b.d, &b.g}) *f = arena.take(c * (c + 1));
    b.de = arena.take(c);
  }
  Buffers() = default;
};

inline float dot(const float* x, const float* y, int64_t n) { return simd::dot(x, y, n); }

// y += a x over n floats.
inline void axpy(float a, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// x <- decay x, or 0 where x is known to be zero (not yet written).
inline void decay_rows(float* x, int64_t n, float decay, bool zero) {
  if (zero) {
    std::fill(x, x + n, 0.0f);
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= decay;
}

// One chunk's rows: row(t) of scan position u0 + t.
struct Rows {
  const DeltaRuleDims& dims;
  const DeltaRuleConfig& cfg;
  int64_t b, u0;
  int64_t operator()(int64_t t) const {
    const int64_t pos = u0 + t;
    return b * dims.n + (cfg.reverse ? dims.n - 1 - pos : pos);
  }
};

// L rows of width w from global rows row(t) into a buffer of row stride ld.
void gather(const Rows& row, const float* src, int64_t w, int64_t L, float* dst, int64_t ld) {
  for (int64_t t = 0; t < L; ++t) std::memcpy(dst + t * ld, src + row(t) * w, sizeof(float) * static_cast<size_t>(w));
}
void scatter(const Rows& row, const float* src, int64_t ld, int64_t w, int64_t L, float* dst) {
  for (int64_t t = 0; t < L; ++t) std::memcpy(dst + row(t) * w, src + t * ld, sizeof(float) * static_cast<size_t>(w));
}

// The state (dk x dv, as the API keeps it) into and out of its padded buffer.
void load_state(const Buffers& m, const float* from, float* to) {
  for (int64_t i = 0; i < m.dk; ++i) std::memcpy(to + i * m.dvp, from + i * m.dv, sizeof(float) * static_cast<size_t>(m.dv));
}
void store_state(const Buffers& m, const float* from, float* to) {
  for (int64_t i = 0; i < m.dk; ++i) std::memcpy(to + i * m.dv, from + i * m.dvp, sizeof(float) * static_cast<size_t>(m.dv));
}

// dst (L x dkp) = diag(scale) src, row by row.
void scale_rows(const float* src, const float* scale, int64_t L, int64_t ld, float* dst) {
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < ld; ++i) dst[t * ld + i] = scale[t] * src[t * ld + i];
}

// D from alpha: running products from the diagonal leftwards.
void decays(const Buffers& m, const Rows& row, const float* alpha, int64_t L) {
  for (int64_t t = 0; t < L; ++t) {
    float p = 1.0f;
    m.D(t, t) = 1.0f;
    for (int64_t s = t - 1; s >= -1; --s) m.D(t, s) = p *= alpha[row(s + 1)];
  }
}

// The chunk's forward quantities from its rows (gathered here): k.k in kk and A (erase), q.k in
// qk and P = D o q.k (readout), K S0 and Q S0 (unless S0 is zero), R = V - diag(b) K S0 in r,
// X = (I + A)^-1 diag(beta) and W = X R.
void chunk_writes(const Buffers& m, const Rows& row, const float* q, const float* k, const float* v, const float* beta,
                  int64_t L, bool erase, bool s0_zero) {
  const int64_t dk = m.dk, dv = m.dv, dkp = m.dkp, dvp = m.dvp, cp = m.cp;
  gather(row, k, dk, L, m.kc, dkp);
  if (q != nullptr) gather(row, q, dk, L, m.qc, dkp);
  gather(row, v, dv, L, m.r, dvp);
  simd::transpose(m.kc, L, dk, dkp, m.kt, cp, cp);
  if (erase) gemm(L, cp, dk, rows_of(m.kc, dkp), m.kt, cp, m.kk, cp, false, Tri::lower_out);
  if (q != nullptr) gemm(L, cp, dk, rows_of(m.qc, dkp), m.kt, cp, m.qk, cp, false, Tri::lower_out);
  for (int64_t t = 0; t < L; ++t)
    for (int64_t s = 0; s < L; ++s) {
      if (erase) m.a[t * cp + s] = s < t ? beta[row(t)] * m.D(t, s) * m.kk[t * cp + s] : 0.0f;
      if (q != nullptr) m.p[t * cp + s] = s <= t ? m.D(t, s) * m.qk[t * cp + s] : 0.0f;
    }
  if (!s0_zero) {
    if (erase) {
      gemm(L, dvp, dk, rows_of(m.kc, dkp), m.s0, dvp, m.ks0, dvp, false);
      for (int64_t t = 0; t < L; ++t) axpy(-m.D(t, -1), m.ks0 + t * dvp, m.r + t * dvp, dvp);
    }
    if (q != nullptr) gemm(L, dvp, dk, rows_of(m.qc, dkp), m.s0, dvp, m.qs0, dvp, false);
  }
  // X = (I + A)^-1 diag(beta), row by row: X_t = beta_t e_t - sum_{s<t} A_ts X_s.
  for (int64_t t = 0; t < L; ++t) {
    float* xt = m.x + t * cp;
    std::fill(xt, xt + cp, 0.0f);
    xt[t] = beta[row(t)];
    if (erase)
      for (int64_t s = 0; s < t; ++s) axpy(-m.a[t * cp + s], m.x + s * cp, xt, s + 1);
  }
  gemm(L, dvp, L, rows_of(m.x, cp), m.r, dvp, m.w, dvp, false, Tri::lower_k);
}

// to (dk x dvp) = or += K^T diag(scale) W over the chunk's first `rows` tokens.
void keys_times_writes(const Buffers& m, const float* scale, int64_t rows, float* to, bool accumulate) {
  scale_rows(m.kc, scale, rows, m.dkp, m.ke);
  gemm(m.dk, m.dvp, rows, transpose_of(m.ke, m.dkp), m.w, m.dvp, to, m.dvp, accumulate);
}

// Row L-1 of D over s = 0..L-1 (e), contiguous.
void last_row(const Buffers& m, int64_t L, float* e) {
  for (int64_t s = 0; s < L; ++s) e[s] = m.D(L - 1, s);
}

// The longest chunk a span gives.
int64_t longest(const DeltaRuleDims& dims, int64_t span) { return std::max<int64_t>(1, std::min(span, dims.n)); }

}  // namespace

int64_t backward_share(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t c = longest(dims, std::max(cfg.chunk, kMaxChunkedDeltaRuleChunk));
  return Buffers::floats(c, dims.dk, dims.dv);
}

void forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t span, const float* q, const float* k,
             const float* v, const float* beta, const float* alpha, float* out, float* final_state,
             float* checkpoints, int threads) {
  const int64_t n = dims.n, state = dims.dk * dims.dv, chunk = span;
  const bool own_checkpoints = span == cfg.chunk;  // else one chunk, the checkpoints taken inside it
  const int64_t per_slice = delta_rule_checkpoints(dims, cfg);
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> space(static_cast<size_t>(Buffers::floats(longest(dims, span), dims.dk, dims.dv)));
    const Buffers m(space.data(), longest(dims, span), dims.dk, dims.dv);
    std::vector<float> e(static_cast<size_t>(m.c)), scratch(static_cast<size_t>(m.dk * m.dvp));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      bool s0_zero = true;
      for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        if (checkpoints != nullptr && t0 > 0 && own_checkpoints) {
          float* to = checkpoints + (b * per_slice + t0 / chunk - 1) * state;
          if (s0_zero)
            std::fill(to, to + state, 0.0f);
          else
            store_state(m, m.s0, to);
        }
        const int64_t L = std::min(chunk, n - t0);
        const Rows row{dims, cfg, b, t0};
        decays(m, row, alpha, L);
        chunk_writes(m, row, q, k, v, beta, L, cfg.erase, s0_zero);
        // One chunk over several checkpoints' chunks: the state before token p, sum over s < p of
        // D_{p-1,s} k_s w_s^T (from a zero state).
        for (int64_t p = cfg.chunk; checkpoints != nullptr && !own_checkpoints && p < L; p += cfg.chunk) {
          for (int64_t s = 0; s < p; ++s) e[s] = m.D(p - 1, s);
          keys_times_writes(m, e.data(), p, scratch.data(), false);
          store_state(m, scratch.data(), checkpoints + (b * per_slice + p / cfg.chunk - 1) * state);
        }
        if (q != nullptr) {  // out = diag(b) Q S0 + P W, in dy's rows, then to the output rows
          gemm(L, m.dvp, L, rows_of(m.p, m.cp), m.w, m.dvp, m.dy, m.dvp, false, Tri::lower_k);
          if (!s0_zero)
            for (int64_t t = 0; t < L; ++t) axpy(m.D(t, -1), m.qs0 + t * m.dvp, m.dy + t * m.dvp, m.dvp);
          scatter(row, m.dy, m.dvp, dims.dv, L, out);
        }
        if (t0 + chunk < n || final_state != nullptr) {  // S0 <- b_{L-1} S0 + K^T diag(e) W
          decay_rows(m.s0, m.dk * m.dvp, m.D(L - 1, -1), s0_zero);
          last_row(m, L, e.data());
          keys_times_writes(m, e.data(), L, m.s0, true);
          s0_zero = false;
        }
      }
      if (final_state != nullptr) {
        float* to = final_state + b * state;
        if (s0_zero)
          std::fill(to, to + state, 0.0f);
        else
          store_state(m, m.s0, to);
      }
    }
  }
}

void backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t span, const float* q, const float* k,
              const float* v, const float* beta, const float* alpha, const float* checkpoints, const float* d_out,
              const float* d_final_state, float* dq, float* dk_out, float* dv_out, float* d_beta, float* d_alpha,
              float* workspace, int threads) {
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv, chunk = span;
  const int64_t per_slice = delta_rule_checkpoints(dims, cfg), share = backward_share(dims, cfg);
  const bool readout = q != nullptr, erase = cfg.erase;
#pragma omp parallel num_threads(threads)
  {
    const Buffers m(workspace + static_cast<int64_t>(omp_get_thread_num()) * share, longest(dims, span), dk, dv);
    const int64_t dkp = m.dkp, dvp = m.dvp, cp = m.cp, c = m.c;
    std::vector<float> e(static_cast<size_t>(c)), bb(static_cast<size_t>(c));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      bool ds_zero = d_final_state == nullptr;
      if (!ds_zero) load_state(m, d_final_state + b * state, m.ds);
      for (int64_t ci = (n + chunk - 1) / chunk - 1; ci >= 0; --ci) {
        const int64_t t0 = ci * chunk, L = std::min(chunk, n - t0);
        const bool s0_zero = ci == 0;
        if (!s0_zero) {  // S0, and S0^T for dq's and dk's products with it
          load_state(m, checkpoints + (b * per_slice + ci - 1) * state, m.s0);
          simd::transpose(m.s0, dk, dv, dvp, m.s0t, dkp, dkp);
        }
        const Rows row{dims, cfg, b, t0};
        decays(m, row, alpha, L);
        chunk_writes(m, row, q, k, v, beta, L, erase, s0_zero);
        last_row(m, L, e.data());
        if (readout) gather(row, d_out, dv, L, m.dout, dvp);
        // dW = P^T dout + diag(e) K dS, into dy; de_s = (K dS)_s . w_s.
        if (readout)
          gemm(L, dvp, L, transpose_of(m.p, cp), m.dout, dvp, m.dy, dvp, false, Tri::upper_k);
        else
          std::fill(m.dy, m.dy + L * dvp, 0.0f);
        std::fill(m.de, m.de + L, 0.0f);
        if (!ds_zero) {
          gemm(L, dvp, dk, rows_of(m.kc, dkp), m.ds, dvp, m.kds, dvp, false);
          for (int64_t s = 0; s < L; ++s) {
            axpy(e[s], m.kds + s * dvp, m.dy + s * dvp, dvp);
            m.de[s] = dot(m.kds + s * dvp, m.w + s * dvp, dvp);
          }
        }
        if (erase)  // (I + A)^T dY = dW, from the last row up
          for (int64_t t = L - 1; t >= 0; --t)
            for (int64_t s = t + 1; s < L; ++s) axpy(-m.a[s * cp + t], m.dy + s * dvp, m.dy + t * dvp, dvp);
        // dA = -dY W^T (s < t), dP = dout W^T (s <= t), then dKK (into sym), dQK (into dp), G.
        simd::transpose(m.w, L, dv, dvp, m.wt, cp, cp);
        if (erase) gemm(L, cp, dv, rows_of(m.dy, dvp), m.wt, cp, m.da, cp, false, Tri::lower_out);
        if (readout) gemm(L, cp, dv, rows_of(m.dout, dvp), m.wt, cp, m.dp, cp, false, Tri::lower_out);
        for (int64_t t = 0; t < L; ++t) {
          const float beta_t = beta[row(t)];
          for (int64_t s = 0; s < L; ++s) {
            float g = 0.0f;
            if (erase) {
              const float da = s < t ? -m.da[t * cp + s] : 0.0f;
              m.da[t * cp + s] = da;
              m.sym[t * cp + s] = da * beta_t * m.D(t, s);  // dKK, made symmetric below
              g += da * beta_t * m.kk[t * cp + s];
            }
            if (readout) {
              const float dp = s <= t ? m.dp[t * cp + s] : 0.0f;
              m.dp[t * cp + s] = dp * (s <= t ? m.D(t, s) : 0.0f);  // dQK
              if (s < t) g += dp * m.qk[t * cp + s];
            }
            if (s <= t) m.G(t, s) = s < t ? g : 0.0f;
          }
        }
        if (erase)  // dKK + dKK^T
          for (int64_t t = 0; t < L; ++t)
            for (int64_t s = t + 1; s < L; ++s) m.sym[t * cp + s] = m.sym[s * cp + t];
        // dq = diag(b) dout S0^T + dQK K.
        if (readout) {
          if (!s0_zero) {
            gemm(L, dkp, dv, rows_of(m.dout, dvp), m.s0t, dkp, m.dqc, dkp, false);
            for (int64_t t = 0; t < L; ++t) decay_rows(m.dqc + t * dkp, dkp, m.D(t, -1), false);
          }
          gemm(L, dkp, L, rows_of(m.dp, cp), m.kc, dkp, m.dqc, dkp, !s0_zero, Tri::lower_k);
          scatter(row, m.dqc, dkp, dk, L, dq);
        }
        // dk = diag(e) W dS^T + dQK^T Q + (dKK + dKK^T) K - diag(b beta) dY S0^T.
        if (!ds_zero) {
          simd::transpose(m.ds, dk, dv, dvp, m.dst, dkp, dkp);
          gemm(L, dkp, dv, rows_of(m.w, dvp), m.dst, dkp, m.dkc, dkp, false);
          for (int64_t t = 0; t < L; ++t) decay_rows(m.dkc + t * dkp, dkp, e[t], false);
        }
        bool dk_written = !ds_zero;
        if (readout) {
          gemm(L, dkp, L, transpose_of(m.dp, cp), m.qc, dkp, m.dkc, dkp, dk_written, Tri::upper_k);
          dk_written = true;
        }
        if (erase) {
          gemm(L, dkp, L, rows_of(m.sym, cp), m.kc, dkp, m.dkc, dkp, dk_written);
          dk_written = true;
          if (!s0_zero) {
            gemm(L, dkp, dv, rows_of(m.dy, dvp), m.s0t, dkp, m.tk, dkp, false);
            for (int64_t t = 0; t < L; ++t) axpy(-m.D(t, -1) * beta[row(t)], m.tk + t * dkp, m.dkc + t * dkp, dkp);
          }
        }
        if (!dk_written) std::fill(m.dkc, m.dkc + L * dkp, 0.0f);
        scatter(row, m.dkc, dkp, dk, L, dk_out);
        // dv, dbeta, db (G's column -1).
        for (int64_t t = 0; t < L; ++t) {
          const int64_t rt = row(t);
          const float beta_t = beta[rt];
          for (int64_t j = 0; j < dv; ++j) dv_out[rt * dv + j] = beta_t * m.dy[t * dvp + j];
          float dbeta = dot(m.r + t * dvp, m.dy + t * dvp, dvp), db = 0.0f;
          if (erase)
            for (int64_t s = 0; s < t; ++s) dbeta += m.da[t * cp + s] * m.D(t, s) * m.kk[t * cp + s];
          if (!s0_zero) {
            if (readout) db += dot(m.qs0 + t * dvp, m.dout + t * dvp, dvp);
            if (erase) db -= beta_t * dot(m.ks0 + t * dvp, m.dy + t * dvp, dvp);
          }
          d_beta[rt] = dbeta;
          m.G(t, -1) = db;
        }
        for (int64_t s = 0; s + 1 < L; ++s) m.G(L - 1, s) += m.de[s];
        if (!s0_zero && !ds_zero) m.G(L - 1, -1) += dot(m.s0, m.ds, dk * dvp);
        // d alpha_r = sum_{t >= r} D_tr sum_{-1 <= s < r} G_ts D_{r-1,s}.
        for (int64_t r = 0; r < L; ++r) {
          float acc = 0.0f;
          for (int64_t t = r; t < L; ++t) {
            float inner = r == 0 ? m.G(t, -1) : 0.0f;
            for (int64_t s = -1; s < r && r > 0; ++s) inner += m.G(t, s) * m.D(r - 1, s);
            acc += m.D(t, r) * inner;
          }
          d_alpha[row(r)] = acc;
        }
        if (ci == 0) continue;  // no state before the first chunk
        // dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY.
        decay_rows(m.ds, dk * dvp, m.D(L - 1, -1), ds_zero);
        for (int64_t t = 0; t < L; ++t) bb[t] = m.D(t, -1);
        if (readout) {
          scale_rows(m.qc, bb.data(), L, dkp, m.kq);
          gemm(dk, dvp, L, transpose_of(m.kq, dkp), m.dout, dvp, m.ds, dvp, true);
        }
        if (erase) {
          for (int64_t t = 0; t < L; ++t) bb[t] = -m.D(t, -1) * beta[row(t)];
          scale_rows(m.kc, bb.data(), L, dkp, m.kq);
          gemm(dk, dvp, L, transpose_of(m.kq, dkp), m.dy, dvp, m.ds, dvp, true);
        }
        ds_zero = false;
      }
    }
  }
}

}  // namespace tarn::kernels::cpu::delta_chunked
