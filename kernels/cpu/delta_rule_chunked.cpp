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
// Every product's inner loop runs over a contiguous row of d (or L) floats, vectorised.
#include "kernels/cpu/delta_rule_chunked.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tarn::kernels::cpu::delta_chunked {
namespace {

// A thread's buffers for chunks of at most c tokens (offsets into one allocation, floats).
struct Buffers {
  int64_t c, dk, dv;
  float *s0, *ds, *r, *w, *dy, *ks0, *qs0, *kds, *d, *g, *x, *a, *kk, *qk, *da, *dkk, *dqk, *de;
  float& D(int64_t t, int64_t s) const { return d[t * (c + 1) + s + 1]; }  // -1 <= s <= t
  float& G(int64_t t, int64_t s) const { return g[t * (c + 1) + s + 1]; }
  static int64_t floats(int64_t c, int64_t dk, int64_t dv) {
    return 2 * dk * dv + 6 * c * dv + 2 * c * (c + 1) + 7 * c * c + c;
  }
  Buffers(float* base, int64_t c_, int64_t dk_, int64_t dv_) : c(c_), dk(dk_), dv(dv_) {
    float* p = base;
    auto take = [&p](int64_t n) {
      float* out = p;
      p += n;
      return out;
    };
    s0 = take(dk * dv), ds = take(dk * dv);
    r = take(c * dv), w = take(c * dv), dy = take(c * dv), ks0 = take(c * dv), qs0 = take(c * dv), kds = take(c * dv);
    d = take(c * (c + 1)), g = take(c * (c + 1));
    x = take(c * c), a = take(c * c), kk = take(c * c), qk = take(c * c), da = take(c * c), dkk = take(c * c);
    dqk = take(c * c), de = take(c);
  }
};

inline float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

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

// D from alpha: running products from the diagonal leftwards.
void decays(const Buffers& m, const Rows& row, const float* alpha, int64_t L) {
  for (int64_t t = 0; t < L; ++t) {
    float p = 1.0f;
    m.D(t, t) = 1.0f;
    for (int64_t s = t - 1; s >= -1; --s) m.D(t, s) = p *= alpha[row(s + 1)];
  }
}

// The chunk's forward quantities: A (with k.k in kk) when erasing, Q K^T in qk (without D) when
// reading out, K S0 and Q S0 (unless S0 is zero), R = V - diag(b) K S0 in r, X, W = X R.
void chunk_writes(const Buffers& m, const Rows& row, const float* q, const float* k, const float* v, const float* beta,
                  int64_t L, bool erase, bool s0_zero) {
  const int64_t dk = m.dk, dv = m.dv, c = m.c;
  for (int64_t t = 0; t < L; ++t) {
    const float* kt = k + row(t) * dk;
    for (int64_t s = 0; s < t && erase; ++s) {
      m.kk[t * c + s] = dot(kt, k + row(s) * dk, dk);
      m.a[t * c + s] = beta[row(t)] * m.D(t, s) * m.kk[t * c + s];
    }
    if (q != nullptr)
      for (int64_t s = 0; s <= t; ++s) m.qk[t * c + s] = dot(q + row(t) * dk, k + row(s) * dk, dk);
    float* rt = m.r + t * dv;
    std::memcpy(rt, v + row(t) * dv, sizeof(float) * static_cast<size_t>(dv));
    if (s0_zero) continue;
    float* ks = m.ks0 + t * dv;
    float* qs = m.qs0 + t * dv;
    std::fill(ks, ks + dv, 0.0f);
    std::fill(qs, qs + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      if (erase) axpy(kt[i], m.s0 + i * dv, ks, dv);
      if (q != nullptr) axpy(q[row(t) * dk + i], m.s0 + i * dv, qs, dv);
    }
    if (erase) axpy(-m.D(t, -1), ks, rt, dv);
  }
  // X = (I + A)^-1 diag(beta), row by row: X_t = beta_t e_t - sum_{s<t} A_ts X_s.
  for (int64_t t = 0; t < L; ++t) {
    float* xt = m.x + t * c;
    std::fill(xt, xt + L, 0.0f);
    xt[t] = beta[row(t)];
    if (erase)
      for (int64_t s = 0; s < t; ++s) axpy(-m.a[t * c + s], m.x + s * c, xt, s + 1);
  }
  for (int64_t t = 0; t < L; ++t) {
    float* wt = m.w + t * dv;
    std::fill(wt, wt + dv, 0.0f);
    for (int64_t s = 0; s <= t; ++s) axpy(m.x[t * c + s], m.r + s * dv, wt, dv);
  }
}

// S0 <- b_{L-1} S0 + K^T diag(e) W.
void advance(const Buffers& m, const Rows& row, const float* k, int64_t L, bool s0_zero) {
  const int64_t dk = m.dk, dv = m.dv;
  decay_rows(m.s0, dk * dv, m.D(L - 1, -1), s0_zero);
  for (int64_t i = 0; i < dk; ++i) {
    float* si = m.s0 + i * dv;
    for (int64_t s = 0; s < L; ++s) axpy(m.D(L - 1, s) * k[row(s) * dk + i], m.w + s * dv, si, dv);
  }
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
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv, chunk = span;
  const bool own_checkpoints = span == cfg.chunk;  // else one chunk, the checkpoints taken inside it
  const int64_t per_slice = delta_rule_checkpoints(dims, cfg);
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> space(static_cast<size_t>(backward_share(dims, cfg)));
    const Buffers m(space.data(), longest(dims, span), dk, dv);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      bool s0_zero = true;
      for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        if (checkpoints != nullptr && t0 > 0 && own_checkpoints) {
          float* to = checkpoints + (b * per_slice + t0 / chunk - 1) * state;
          if (s0_zero)
            std::fill(to, to + state, 0.0f);
          else
            std::memcpy(to, m.s0, sizeof(float) * static_cast<size_t>(state));
        }
        const int64_t L = std::min(chunk, n - t0);
        const Rows row{dims, cfg, b, t0};
        decays(m, row, alpha, L);
        chunk_writes(m, row, q, k, v, beta, L, cfg.erase, s0_zero);
        // One chunk over several checkpoints' chunks: the state before token p, sum over s < p of
        // D_{p-1,s} k_s w_s^T (from a zero state).
        for (int64_t p = cfg.chunk; checkpoints != nullptr && !own_checkpoints && p < L; p += cfg.chunk) {
          float* to = checkpoints + (b * per_slice + p / cfg.chunk - 1) * state;
          std::fill(to, to + state, 0.0f);
          for (int64_t i = 0; i < dk; ++i)
            for (int64_t s = 0; s < p; ++s) axpy(m.D(p - 1, s) * k[row(s) * dk + i], m.w + s * dv, to + i * dv, dv);
        }
        if (q != nullptr)  // out = diag(b) Q S0 + (D o Q K^T) W
          for (int64_t t = 0; t < L; ++t) {
            float* ot = out + row(t) * dv;
            if (s0_zero)
              std::fill(ot, ot + dv, 0.0f);
            else
              for (int64_t j = 0; j < dv; ++j) ot[j] = m.D(t, -1) * m.qs0[t * dv + j];
            for (int64_t s = 0; s <= t; ++s) axpy(m.D(t, s) * m.qk[t * m.c + s], m.w + s * dv, ot, dv);
          }
        if (t0 + chunk < n || final_state != nullptr) {
          advance(m, row, k, L, s0_zero);
          s0_zero = false;
        }
      }
      if (final_state != nullptr) {
        float* to = final_state + b * state;
        if (s0_zero)
          std::fill(to, to + state, 0.0f);
        else
          std::memcpy(to, m.s0, sizeof(float) * static_cast<size_t>(state));
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
    const int64_t c = longest(dims, span);
    const Buffers m(workspace + static_cast<int64_t>(omp_get_thread_num()) * share, c, dk, dv);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      bool ds_zero = d_final_state == nullptr;
      if (!ds_zero) std::memcpy(m.ds, d_final_state + b * state, sizeof(float) * static_cast<size_t>(state));
      for (int64_t ci = (n + chunk - 1) / chunk - 1; ci >= 0; --ci) {
        const int64_t t0 = ci * chunk, L = std::min(chunk, n - t0);
        const bool s0_zero = ci == 0;
        if (!s0_zero)
          std::memcpy(m.s0, checkpoints + (b * per_slice + ci - 1) * state, sizeof(float) * static_cast<size_t>(state));
        const Rows row{dims, cfg, b, t0};
        decays(m, row, alpha, L);
        chunk_writes(m, row, q, k, v, beta, L, erase, s0_zero);
        // dW = (D o Q K^T)^T dout + diag(e) K dS, into dy; (K dS) o W's row sums are de.
        for (int64_t s = 0; s < L; ++s) {
          float* dws = m.dy + s * dv;
          std::fill(dws, dws + dv, 0.0f);
          m.de[s] = 0.0f;
          if (!ds_zero) {
            float* kds = m.kds + s * dv;
            std::fill(kds, kds + dv, 0.0f);
            for (int64_t i = 0; i < dk; ++i) axpy(k[row(s) * dk + i], m.ds + i * dv, kds, dv);
            axpy(m.D(L - 1, s), kds, dws, dv);
            m.de[s] = dot(kds, m.w + s * dv, dv);
          }
          if (readout)
            for (int64_t t = s; t < L; ++t) axpy(m.D(t, s) * m.qk[t * c + s], d_out + row(t) * dv, dws, dv);
        }
        if (erase)  // (I + A)^T dY = dW, from the last row up
          for (int64_t t = L - 1; t >= 0; --t)
            for (int64_t s = t + 1; s < L; ++s) axpy(-m.a[s * c + t], m.dy + s * dv, m.dy + t * dv, dv);
        // dA, dP -> dKK, dQK and G_ts (s < t).
        for (int64_t t = 0; t < L; ++t) {
          const float* dot_t = readout ? d_out + row(t) * dv : nullptr;
          for (int64_t s = 0; s <= t; ++s) {
            float g = 0.0f;
            if (erase) {
              const float da = s < t ? -dot(m.dy + t * dv, m.w + s * dv, dv) : 0.0f;
              m.da[t * c + s] = da;
              m.dkk[t * c + s] = da * beta[row(t)] * m.D(t, s);
              if (s < t) g += da * beta[row(t)] * m.kk[t * c + s];
            }
            if (readout) {
              const float dp = dot(dot_t, m.w + s * dv, dv);
              m.dqk[t * c + s] = dp * m.D(t, s);
              if (s < t) g += dp * m.qk[t * c + s];
            }
            m.G(t, s) = s < t ? g : 0.0f;
          }
        }
        // Rows: dq, dk, dv, dbeta, db (G's column -1).
        for (int64_t t = 0; t < L; ++t) {
          const int64_t rt = row(t);
          const float bt = m.D(t, -1), beta_t = beta[rt];
          if (readout) {
            float* dqt = dq + rt * dk;
            std::fill(dqt, dqt + dk, 0.0f);
            if (!s0_zero)
              for (int64_t i = 0; i < dk; ++i) dqt[i] = bt * dot(d_out + rt * dv, m.s0 + i * dv, dv);
            for (int64_t s = 0; s <= t; ++s) axpy(m.dqk[t * c + s], k + row(s) * dk, dqt, dk);
          }
          float* dkt = dk_out + rt * dk;
          std::fill(dkt, dkt + dk, 0.0f);
          if (!ds_zero)
            for (int64_t i = 0; i < dk; ++i) dkt[i] = m.D(L - 1, t) * dot(m.w + t * dv, m.ds + i * dv, dv);
          if (readout)
            for (int64_t p = t; p < L; ++p) axpy(m.dqk[p * c + t], q + row(p) * dk, dkt, dk);
          if (erase) {
            for (int64_t p = t + 1; p < L; ++p) axpy(m.dkk[p * c + t], k + row(p) * dk, dkt, dk);
            for (int64_t p = 0; p < t; ++p) axpy(m.dkk[t * c + p], k + row(p) * dk, dkt, dk);
            if (!s0_zero)
              for (int64_t i = 0; i < dk; ++i) dkt[i] -= bt * beta_t * dot(m.dy + t * dv, m.s0 + i * dv, dv);
          }
          for (int64_t j = 0; j < dv; ++j) dv_out[rt * dv + j] = beta_t * m.dy[t * dv + j];
          float dbeta = dot(m.r + t * dv, m.dy + t * dv, dv), db = 0.0f;
          if (erase)
            for (int64_t s = 0; s < t; ++s) dbeta += m.da[t * c + s] * m.D(t, s) * m.kk[t * c + s];
          if (!s0_zero) {
            if (readout) db += dot(m.qs0 + t * dv, d_out + rt * dv, dv);
            if (erase) db -= beta_t * dot(m.ks0 + t * dv, m.dy + t * dv, dv);
          }
          d_beta[rt] = dbeta;
          m.G(t, -1) = db;
        }
        for (int64_t s = 0; s + 1 < L; ++s) m.G(L - 1, s) += m.de[s];
        if (!s0_zero && !ds_zero) m.G(L - 1, -1) += dot(m.s0, m.ds, state);
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
        decay_rows(m.ds, state, m.D(L - 1, -1), ds_zero);
        for (int64_t i = 0; i < dk; ++i) {
          float* dsi = m.ds + i * dv;
          for (int64_t t = 0; t < L; ++t) {
            const int64_t rt = row(t);
            if (readout) axpy(m.D(t, -1) * q[rt * dk + i], d_out + rt * dv, dsi, dv);
            if (erase) axpy(-m.D(t, -1) * beta[rt] * k[rt * dk + i], m.dy + t * dv, dsi, dv);
          }
        }
        ds_zero = false;
      }
    }
  }
}

}  // namespace tarn::kernels::cpu::delta_chunked
