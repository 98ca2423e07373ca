// The gated delta rule's scan (kernels/delta_rule.h): token by token over the dk x dv state,
// which at tarn's sizes (dk = dv = 64, 16 KiB) stays in L1. Each token costs one pass over the
// state forward (the write, the readout and the next token's S^T k fused: every row of S is
// loaded and stored once) and three backward (the chunk's recomputation, then two fused passes
// for the gradients), each pass vectorised over dv. What bounded the passes was their sums: kept
// in memory, each row waited on the previous row's store, and per-row horizontal sums ran as
// scalar chains; the fixed-width (dv = 64) paths below keep them in registers and lanes. Fusing
// the backward's second pass of token t with the first of token t - 1 (one walk over the rows
// instead of two) was tried and ran 1.6-1.9x slower: its four row-constant vectors of dv = 64
// floats (w, du, dout and the dw sums) need 32 ymm registers, and AVX2 has 16. AVX-512 versions
// of the three fixed-width passes (4 zmm a row, picked at run time like the attention tiles) ran
// no faster either (forward+backward at B*H = 4, N = 4,096: 18.5-21.8 ms against 19.0-21.3 ms,
// three rounds each, AMD EPYC with AVX-512): a pass moves every row of the state through L1 once
// (one 256-byte load and store per row and token), and the stores, not the FMAs, bound it. The
// chunked (WY) form (kernels/cpu/delta_rule_chunked.cpp) runs instead where a sequence is a
// single chunk, whose d^2 terms vanish (kernels/delta_rule.h says when; docs/design.md section 2
// counts its cost).
#include "kernels/delta_rule.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/delta_rule_chunked.h"

namespace tarn::kernels::cpu {
namespace {

// u = S^T k (dv).
inline void state_times_key(const float* s, const float* k, float* u, int64_t dk, int64_t dv) {
  std::fill(u, u + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i];
    const float* row = s + i * dv;
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) u[j] += ki * row[j];
  }
}

// w = beta (v - alpha u), or beta v without the erase.
inline void write_vector(const float* v, const float* u, float beta, float alpha, float* w, int64_t dv, bool erase) {
  if (erase) {
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) w[j] = beta * (v[j] - alpha * u[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) w[j] = beta * v[j];
  }
}

// write_and_read for a value width DV known at compile time: the two sums stay in registers
// (the generic loop keeps them in memory, and every row then waits on the previous row's store).
// The sums run over the rows in order, as state_times_key's, so a decoding step (which starts
// from state_times_key) gives the scan's bits.
template <int DV>
inline void write_and_read_fixed(const float* prev, float* next, const float* k, const float* w, float alpha,
                                 const float* q, float* out, const float* k_next, float* u_next, int64_t dk) {
  alignas(64) float o[DV] = {}, un[DV] = {};
  alignas(64) float wl[DV];
  for (int j = 0; j < DV; ++j) wl[j] = w[j];
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i];
    const float qi = q != nullptr ? q[i] : 0.0f, kn = k_next != nullptr ? k_next[i] : 0.0f;
    const float* p = prev + i * DV;
    float* row = next + i * DV;
#pragma omp simd
    for (int j = 0; j < DV; ++j) {
      const float x = alpha * p[j] + ki * wl[j];
      row[j] = x;
      o[j] += qi * x;
      un[j] += kn * x;
    }
  }
  if (q != nullptr) std::copy(o, o + DV, out);
  if (k_next != nullptr) std::copy(un, un + DV, u_next);
}

// One pass over the rows: next = alpha prev + k w^T (next may be prev: in place), and from the
// new rows out = next^T q (when q) and u_next = next^T k_next (when k_next: the following token's
// S^T k).
inline void write_and_read(const float* prev, float* next, const float* k, const float* w, float alpha,
                           const float* q, float* out, const float* k_next, float* u_next, int64_t dk, int64_t dv) {
  if (dv == 64) return write_and_read_fixed<64>(prev, next, k, w, alpha, q, out, k_next, u_next, dk);
  if (q != nullptr) std::fill(out, out + dv, 0.0f);
  if (k_next != nullptr) std::fill(u_next, u_next + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i];
    const float* p = prev + i * dv;
    float* row = next + i * dv;
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) row[j] = alpha * p[j] + ki * w[j];
    if (q != nullptr) {
      const float qi = q[i];
#pragma omp simd
      for (int64_t j = 0; j < dv; ++j) out[j] += qi * row[j];
    }
    if (k_next != nullptr) {
      const float kn = k_next[i];
#pragma omp simd
      for (int64_t j = 0; j < dv; ++j) u_next[j] += kn * row[j];
    }
  }
}

// Row sums without a horizontal reduction per row: each row's dv values are first folded into
// kLanes partial sums (vector adds), the partials stored transposed (lanes[l * rows + i]), and
// all rows summed at once along the lanes (vector adds over i). The generic loops' per-row
// reductions run as a chain of dependent scalar adds, which bounded the backward.
constexpr int kLanes = 8;
inline void scatter_lanes(const float* part, float* lanes, int64_t i, int64_t rows) {
  for (int l = 0; l < kLanes; ++l) lanes[l * rows + i] = part[l];
}
inline void sum_lanes(const float* lanes, float* out, int64_t rows) {
#pragma omp simd
  for (int64_t i = 0; i < rows; ++i) {
    float s = 0.0f;
    for (int l = 0; l < kLanes; ++l) s += lanes[l * rows + i];
    out[i] = s;
  }
}

// The backward's first pass over the rows: dS += q dout^T (when q: the readout's share), then
// dw = dS^T k and prev_dout = S_{t-1} dout.
template <int DV>
inline void read_gradient_fixed(float* ds, const float* prev, const float* k, const float* q, const float* dout,
                                float* dw, float* prev_dout, int64_t dk, float* lanes) {
  alignas(64) float acc[DV] = {};
  alignas(64) float g[DV];
  for (int j = 0; j < DV; ++j) g[j] = dout != nullptr ? dout[j] : 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* dsrow = ds + i * DV;
    const float ki = k[i];
    if (q != nullptr) {
      const float qi = q[i];
      const float* prow = prev + i * DV;
      alignas(32) float part[kLanes] = {};
      for (int c = 0; c < DV; c += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) {
          const float x = dsrow[c + l] + qi * g[c + l];
          dsrow[c + l] = x;
          acc[c + l] += ki * x;
          part[l] += prow[c + l] * g[c + l];
        }
      }
      scatter_lanes(part, lanes, i, dk);
    } else {
#pragma omp simd
      for (int j = 0; j < DV; ++j) acc[j] += ki * dsrow[j];
    }
  }
  std::copy(acc, acc + DV, dw);
  if (q != nullptr) sum_lanes(lanes, prev_dout, dk);
}

// The backward's second pass over the rows for a fixed DV: dk = dS w + S_{t-1} du, returns
// dS : S_{t-1}, and dS <- alpha dS + k du^T.
template <int DV>
inline float write_gradient_fixed(float* ds, const float* prev, const float* k, const float* w, const float* du,
                                  float alpha, float* dk_out, int64_t dk, float* lanes) {
  alignas(32) float da[kLanes] = {};
  alignas(64) float wl[DV], dul[DV];
  for (int j = 0; j < DV; ++j) wl[j] = w[j], dul[j] = du[j];
  for (int64_t i = 0; i < dk; ++i) {
    const float* prow = prev + i * DV;
    float* dsrow = ds + i * DV;
    const float ki = k[i];
    alignas(32) float part[kLanes] = {};
    for (int c = 0; c < DV; c += kLanes) {
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        const int j = c + l;
        const float x = dsrow[j];
        part[l] += x * wl[j] + prow[j] * dul[j];
        da[l] += x * prow[j];
        dsrow[j] = alpha * x + ki * dul[j];
      }
    }
    scatter_lanes(part, lanes, i, dk);
  }
  sum_lanes(lanes, dk_out, dk);
  float total = 0.0f;
  for (int l = 0; l < kLanes; ++l) total += da[l];
  return total;
}

inline void read_gradient(float* ds, const float* prev, const float* k, const float* q, const float* dout, float* dw,
                          float* prev_dout, int64_t dk, int64_t dv, float* lanes) {
  if (dv == 64) return read_gradient_fixed<64>(ds, prev, k, q, dout, dw, prev_dout, dk, lanes);
  std::fill(dw, dw + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* dsrow = ds + i * dv;
    const float ki = k[i];
    if (q != nullptr) {
      const float qi = q[i];
      const float* prow = prev + i * dv;
      float pd = 0.0f;
#pragma omp simd reduction(+ : pd)
      for (int64_t j = 0; j < dv; ++j) {
        dsrow[j] += qi * dout[j];
        dw[j] += ki * dsrow[j];
        pd += prow[j] * dout[j];
      }
      prev_dout[i] = pd;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < dv; ++j) dw[j] += ki * dsrow[j];
    }
  }
}

// The backward's second pass for any width: returns dS : S_{t-1} and writes dk (see
// write_gradient_fixed).
inline float write_gradient(float* ds, const float* prev, const float* k, const float* w, const float* du, float alpha,
                            float* dk_out, int64_t dk, int64_t dv, float* lanes) {
  if (dv == 64) return write_gradient_fixed<64>(ds, prev, k, w, du, alpha, dk_out, dk, lanes);
  float total = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float* prow = prev + i * dv;
    float* dsrow = ds + i * dv;
    float dk_i = 0.0f, da = 0.0f;
    const float ki = k[i];
#pragma omp simd reduction(+ : dk_i, da)
    for (int64_t j = 0; j < dv; ++j) {
      dk_i += dsrow[j] * w[j] + prow[j] * du[j];
      da += dsrow[j] * prow[j];
      dsrow[j] = alpha * dsrow[j] + ki * du[j];
    }
    dk_out[i] = dk_i;
    total += da;
  }
  return total;
}

inline int64_t position(const DeltaRuleConfig& cfg, int64_t n, int64_t t) { return cfg.reverse ? n - 1 - t : t; }

void check_dims(const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  TARN_CHECK(d.slices >= 0 && d.n >= 0 && d.dk > 0 && d.dv > 0, "delta rule: bad dims slices ", d.slices, " n ",
             d.n, " dk ", d.dk, " dv ", d.dv);
  TARN_CHECK(cfg.chunk >= 1, "delta rule: chunk must be >= 1, got ", cfg.chunk);
}

int threads_for(int64_t slices) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), slices)));
}

// A thread's share of the backward's workspace: a chunk's states (L + 1 of them, L = the chunk's
// tokens, at most n), dS, the chunk's S^T k rows (L + 1), w, dw and du (dv each), S_{t-1} dout_t
// (dk) and the row sums' lanes (kLanes x dk).
int64_t backward_share(const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  const int64_t state = d.dk * d.dv, longest = std::max<int64_t>(1, std::min(cfg.chunk, d.n));
  return (longest + 2) * state + (longest + 4) * d.dv + (1 + kLanes) * d.dk;
}

std::atomic<DeltaRuleAlgorithm> g_algorithm{DeltaRuleAlgorithm::automatic};

// The chunk the chunked form runs with (kernels/cpu/delta_rule_chunked.h's span), or 0 for the
// recurrence: forced, the checkpoints' chunks; automatic, the whole sequence when it is short
// enough to be one chunk.
int64_t chunked_span(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const DeltaRuleAlgorithm a = g_algorithm.load();
  if (a == DeltaRuleAlgorithm::chunked) {
    TARN_CHECK(cfg.chunk <= kMaxChunkedDeltaRuleChunk, "delta rule: the chunked algorithm takes chunks of at most ",
               kMaxChunkedDeltaRuleChunk, " tokens, got ", cfg.chunk);
    return cfg.chunk;
  }
  return a == DeltaRuleAlgorithm::automatic && dims.n <= kAutomaticChunkedDeltaRuleTokens ? std::max<int64_t>(dims.n, 1)
                                                                                          : 0;
}

}  // namespace

void delta_rule_set_algorithm(DeltaRuleAlgorithm algorithm) { g_algorithm.store(algorithm); }

int64_t delta_rule_checkpoints(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  return std::max<int64_t>(0, (dims.n + cfg.chunk - 1) / cfg.chunk - 1);
}

size_t delta_rule_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t share = std::max(backward_share(dims, cfg), delta_chunked::backward_share(dims, cfg));
  return static_cast<size_t>(share) * static_cast<size_t>(threads_for(dims.slices));
}

void delta_rule_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                        const float* v, const float* beta, const float* alpha, float* out, float* final_state,
                        float* checkpoints) {
  check_dims(dims, cfg);
  TARN_CHECK((q == nullptr) == (out == nullptr), "delta rule: q and out go together");
  if (const int64_t span = chunked_span(dims, cfg))
    return delta_chunked::forward(dims, cfg, span, q, k, v, beta, alpha, out, final_state, checkpoints,
                                  threads_for(dims.slices));
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv;
  const int64_t per_slice_checkpoints = delta_rule_checkpoints(dims, cfg);
#pragma omp parallel num_threads(threads_for(dims.slices))
  {
    std::vector<float> s(static_cast<size_t>(state)), w(static_cast<size_t>(dv)), u(static_cast<size_t>(2 * dv));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      std::fill(s.begin(), s.end(), 0.0f);
      float *u_cur = u.data(), *u_next = u.data() + dv;
      std::fill(u_cur, u_cur + dv, 0.0f);  // S_0^T k_0 with S_0 = 0
      for (int64_t t = 0; t < n; ++t) {
        if (checkpoints != nullptr && t > 0 && t % cfg.chunk == 0)
          std::memcpy(checkpoints + (b * per_slice_checkpoints + t / cfg.chunk - 1) * state, s.data(),
                      sizeof(float) * static_cast<size_t>(state));
        const int64_t row = b * n + position(cfg, n, t);
        write_vector(v + row * dv, u_cur, beta[row], alpha[row], w.data(), dv, cfg.erase);
        const float* k_next = cfg.erase && t + 1 < n ? k + (b * n + position(cfg, n, t + 1)) * dk : nullptr;
        write_and_read(s.data(), s.data(), k + row * dk, w.data(), alpha[row], q != nullptr ? q + row * dk : nullptr,
                       q != nullptr ? out + row * dv : nullptr, k_next, u_next, dk, dv);
        std::swap(u_cur, u_next);
      }
      if (final_state != nullptr)
        std::memcpy(final_state + b * state, s.data(), sizeof(float) * static_cast<size_t>(state));
    }
  }
}

void delta_rule_backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                         const float* v, const float* beta, const float* alpha, const float* checkpoints,
                         const float* d_out, const float* d_final_state, float* dq, float* dk_out, float* dv_out,
                         float* d_beta, float* d_alpha, float* workspace, size_t workspace_floats) {
  check_dims(dims, cfg);
  TARN_CHECK((q == nullptr) == (d_out == nullptr) && (q == nullptr) == (dq == nullptr),
             "delta rule backward: q, d_out and dq go together");
  TARN_CHECK(workspace_floats >= delta_rule_backward_workspace_floats(dims, cfg),
             "delta rule backward: workspace too small");
  if (const int64_t span = chunked_span(dims, cfg))
    return delta_chunked::backward(dims, cfg, span, q, k, v, beta, alpha, checkpoints, d_out, d_final_state, dq, dk_out,
                                   dv_out, d_beta, d_alpha, workspace, threads_for(dims.slices));
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv, chunk = cfg.chunk;
  const int64_t per_slice_checkpoints = delta_rule_checkpoints(dims, cfg);
  const int64_t share = backward_share(dims, cfg), longest = std::max<int64_t>(1, std::min(chunk, n));
#pragma omp parallel num_threads(threads_for(dims.slices))
  {
    float* states = workspace + static_cast<int64_t>(omp_get_thread_num()) * share;  // longest + 1 states
    float* ds = states + (longest + 1) * state;
    float* us = ds + state;  // us[s]: S_{t0+s-1}^T k_{t0+s}, the S^T k of token t0 + s
    float* w = us + (longest + 1) * dv;
    float* dw = w + dv;
    float* du = dw + dv;
    float* prev_dout = du + dv;  // S_{t-1} dout_t (dk)
    float* lanes = prev_dout + dk;  // kLanes x dk partial row sums
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      if (d_final_state != nullptr)
        std::memcpy(ds, d_final_state + b * state, sizeof(float) * static_cast<size_t>(state));
      else
        std::fill(ds, ds + state, 0.0f);
      for (int64_t c = (n + chunk - 1) / chunk - 1; c >= 0; --c) {
        const int64_t t0 = c * chunk, t1 = std::min(n, t0 + chunk);
        // Recompute the chunk's states (states[s] is S before token t0 + s) and their S^T k.
        if (c == 0)
          std::fill(states, states + state, 0.0f);
        else
          std::memcpy(states, checkpoints + (b * per_slice_checkpoints + c - 1) * state,
                      sizeof(float) * static_cast<size_t>(state));
        const int64_t first = b * n + position(cfg, n, t0);
        if (cfg.erase && c == 0)
          std::fill(us, us + dv, 0.0f);  // S^T k of the zero state
        else if (cfg.erase)
          state_times_key(states, k + first * dk, us, dk, dv);
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t row = b * n + position(cfg, n, t);
          const int64_t s_index = t - t0;
          write_vector(v + row * dv, us + s_index * dv, beta[row], alpha[row], w, dv, cfg.erase);
          const float* k_next = cfg.erase && t + 1 < t1 ? k + (b * n + position(cfg, n, t + 1)) * dk : nullptr;
          write_and_read(states + s_index * state, states + (s_index + 1) * state, k + row * dk, w, alpha[row], nullptr,
                         nullptr, k_next, us + (s_index + 1) * dv, dk, dv);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const int64_t row = b * n + position(cfg, n, t);
          const float* prev = states + (t - t0) * state;
          const float *kt = k + row * dk, *vt = v + row * dv;
          const float bt = beta[row], at = alpha[row];
          const float* u = us + (t - t0) * dv;  // S_{t-1}^T k_t (unused without the erase)
          write_vector(vt, u, bt, at, w, dv, cfg.erase);
          // Pass 1: dS_t += q_t dout_t^T (the readout out_t = S_t^T q_t), dw = dS_t^T k_t, and
          // prev dout_t per row for dq_t = S_t dout_t = alpha (S_{t-1} dout_t) + k_t (w . dout_t).
          const float* dot = q != nullptr ? d_out + row * dv : nullptr;
          read_gradient(ds, prev, kt, q != nullptr ? q + row * dk : nullptr, dot, dw, prev_dout, dk, dv, lanes);
          if (dot != nullptr) {
            float wd = 0.0f;
#pragma omp simd reduction(+ : wd)
            for (int64_t j = 0; j < dv; ++j) wd += w[j] * dot[j];
            for (int64_t i = 0; i < dk; ++i) dq[row * dk + i] = at * prev_dout[i] + kt[i] * wd;
          }
          // The write S_t = alpha S_{t-1} + k w^T, w = beta (v - alpha u), u = S_{t-1}^T k; without
          // the erase u counts as 0 (w = beta v).
          float d_beta_t = 0.0f, d_alpha_t = 0.0f;
          const float erase_scale = cfg.erase ? -at : 0.0f;  // du = -alpha beta dw, or nothing
#pragma omp simd reduction(+ : d_beta_t, d_alpha_t)
          for (int64_t j = 0; j < dv; ++j) {
            const float uj = cfg.erase ? u[j] : 0.0f;
            const float r = vt[j] - at * uj;
            d_beta_t += dw[j] * r;
            d_alpha_t -= bt * dw[j] * uj;
            du[j] = erase_scale * bt * dw[j];
            dv_out[row * dv + j] = bt * dw[j];
          }
          // Pass 2: dk_t = dS_t w + S_{t-1} du, d_alpha's sum dS_t : S_{t-1}, and
          // dS_{t-1} = alpha dS_t + k_t du^T.
          d_alpha_t += write_gradient(ds, prev, kt, w, du, at, dk_out + row * dk, dk, dv, lanes);
          d_beta[row] = d_beta_t;
          d_alpha[row] = d_alpha_t;
        }
      }
    }
  }
}

void delta_rule_step(int64_t slices, int64_t dk, int64_t dv, float* state, const float* q, const float* k,
                     const float* v, const float* beta, const float* alpha, float* out, bool erase) {
  std::vector<float> u(static_cast<size_t>(dv), 0.0f), w(static_cast<size_t>(dv));
  for (int64_t b = 0; b < slices; ++b) {
    float* s = state + b * dk * dv;
    if (erase) state_times_key(s, k + b * dk, u.data(), dk, dv);
    write_vector(v + b * dv, u.data(), beta[b], alpha[b], w.data(), dv, erase);
    write_and_read(s, s, k + b * dk, w.data(), alpha[b], q + b * dk, out + b * dv, nullptr, nullptr, dk, dv);
  }
}

}  // namespace tarn::kernels::cpu
