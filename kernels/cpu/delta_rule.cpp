// The gated delta rule's scan (kernels/delta_rule.h): token by token, each step a few passes
// over the dk x dv state. At tarn's sizes (dk = dv = 64, a 16 KiB state) the state stays in L1
// and each pass vectorises over dv; a chunked (WY) form would trade these rank-1 passes for
// matrix products, which pays only at larger heads and longer sequences.
#include "kernels/delta_rule.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/check.h"

namespace tarn::kernels::cpu {
namespace {

struct Slice {
  const float *q, *k, *v, *beta, *alpha;
  float* out;
};

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

// S <- alpha S + k w^T with w = beta (v - alpha S^T k), or w = beta v without the erase; leaves
// w in `w`.
inline void write_token(float* s, const float* k, const float* v, float beta, float alpha, float* w, int64_t dk,
                        int64_t dv, bool erase) {
  if (erase) {
    state_times_key(s, k, w, dk, dv);
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) w[j] = beta * (v[j] - alpha * w[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) w[j] = beta * v[j];
  }
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i];
    float* row = s + i * dv;
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) row[j] = alpha * row[j] + ki * w[j];
  }
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

}  // namespace

int64_t delta_rule_checkpoints(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  return (dims.n + cfg.chunk - 1) / cfg.chunk;
}

size_t delta_rule_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t state = dims.dk * dims.dv;
  const int64_t share = (cfg.chunk + 2) * state + 4 * dims.dv;
  return static_cast<size_t>(share) * static_cast<size_t>(threads_for(dims.slices));
}

void delta_rule_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                        const float* v, const float* beta, const float* alpha, float* out, float* final_state,
                        float* checkpoints) {
  check_dims(dims, cfg);
  TARN_CHECK((q == nullptr) == (out == nullptr), "delta rule: q and out go together");
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv;
  const int64_t per_slice_checkpoints = delta_rule_checkpoints(dims, cfg);
#pragma omp parallel num_threads(threads_for(dims.slices))
  {
    std::vector<float> s(static_cast<size_t>(state)), w(static_cast<size_t>(dv));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      std::fill(s.begin(), s.end(), 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        if (checkpoints != nullptr && t % cfg.chunk == 0)
          std::memcpy(checkpoints + (b * per_slice_checkpoints + t / cfg.chunk) * state, s.data(),
                      sizeof(float) * static_cast<size_t>(state));
        const int64_t p = position(cfg, n, t), row = b * n + p;
        write_token(s.data(), k + row * dk, v + row * dv, beta[row], alpha[row], w.data(), dk, dv, cfg.erase);
        if (q != nullptr) state_times_key(s.data(), q + row * dk, out + row * dv, dk, dv);
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
  const int64_t n = dims.n, dk = dims.dk, dv = dims.dv, state = dk * dv, chunk = cfg.chunk;
  const int64_t per_slice_checkpoints = delta_rule_checkpoints(dims, cfg);
  const int64_t share = (chunk + 2) * state + 4 * dv;
#pragma omp parallel num_threads(threads_for(dims.slices))
  {
    float* states = workspace + static_cast<int64_t>(omp_get_thread_num()) * share;  // chunk + 1 states
    float* ds = states + (chunk + 1) * state;
    float* u = ds + state;
    float* w = u + dv;
    float* dw = w + dv;
    float* du = dw + dv;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < dims.slices; ++b) {
      if (d_final_state != nullptr)
        std::memcpy(ds, d_final_state + b * state, sizeof(float) * static_cast<size_t>(state));
      else
        std::fill(ds, ds + state, 0.0f);
      for (int64_t c = per_slice_checkpoints - 1; c >= 0; --c) {
        const int64_t t0 = c * chunk, t1 = std::min(n, t0 + chunk);
        // Recompute the chunk's states: states[i] is S before token t0 + i.
        std::memcpy(states, checkpoints + (b * per_slice_checkpoints + c) * state,
                    sizeof(float) * static_cast<size_t>(state));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t row = b * n + position(cfg, n, t);
          float* next = states + (t - t0 + 1) * state;
          std::memcpy(next, next - state, sizeof(float) * static_cast<size_t>(state));
          write_token(next, k + row * dk, v + row * dv, beta[row], alpha[row], w, dk, dv, cfg.erase);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
          const int64_t row = b * n + position(cfg, n, t);
          const float* prev = states + (t - t0) * state;
          const float* cur = prev + state;
          const float *kt = k + row * dk, *vt = v + row * dv;
          const float bt = beta[row], at = alpha[row];
          if (q != nullptr) {  // out_t = S_t^T q_t
            const float *qt = q + row * dk, *dot = d_out + row * dv;
            for (int64_t i = 0; i < dk; ++i) {
              const float* srow = cur + i * dv;
              float* dsrow = ds + i * dv;
              float acc = 0.0f;
              const float qi = qt[i];
#pragma omp simd reduction(+ : acc)
              for (int64_t j = 0; j < dv; ++j) {
                acc += srow[j] * dot[j];
                dsrow[j] += qi * dot[j];
              }
              dq[row * dk + i] = acc;
            }
          }
          // The write S_t = alpha S_{t-1} + k w^T, w = beta (v - alpha u), u = S_{t-1}^T k; without
          // the erase u counts as 0 (w = beta v).
          if (cfg.erase)
            state_times_key(prev, kt, u, dk, dv);
          else
            std::fill(u, u + dv, 0.0f);
          state_times_key(ds, kt, dw, dk, dv);  // dw = dS^T k
          float d_beta_t = 0.0f, d_alpha_t = 0.0f;
          const float erase_scale = cfg.erase ? -at : 0.0f;  // du = -alpha beta dw, or nothing
#pragma omp simd reduction(+ : d_beta_t, d_alpha_t)
          for (int64_t j = 0; j < dv; ++j) {
            const float r = vt[j] - at * u[j];
            w[j] = bt * r;
            d_beta_t += dw[j] * r;
            d_alpha_t -= bt * dw[j] * u[j];
            du[j] = erase_scale * bt * dw[j];
            dv_out[row * dv + j] = bt * dw[j];
          }
          for (int64_t i = 0; i < dk; ++i) {
            const float* prow = prev + i * dv;
            float* dsrow = ds + i * dv;
            float dk_i = 0.0f, da = 0.0f;
            const float ki = kt[i];
#pragma omp simd reduction(+ : dk_i, da)
            for (int64_t j = 0; j < dv; ++j) {
              dk_i += dsrow[j] * w[j] + prow[j] * du[j];
              da += dsrow[j] * prow[j];
              dsrow[j] = at * dsrow[j] + ki * du[j];
            }
            dk_out[row * dk + i] = dk_i;
            d_alpha_t += da;
          }
          d_beta[row] = d_beta_t;
          d_alpha[row] = d_alpha_t;
        }
      }
    }
  }
}

void delta_rule_step(int64_t slices, int64_t dk, int64_t dv, float* state, const float* q, const float* k,
                     const float* v, const float* beta, const float* alpha, float* out, bool erase) {
  std::vector<float> w(static_cast<size_t>(dv));
  for (int64_t b = 0; b < slices; ++b) {
    float* s = state + b * dk * dv;
    write_token(s, k + b * dk, v + b * dv, beta[b], alpha[b], w.data(), dk, dv, erase);
    state_times_key(s, q + b * dk, out + b * dv, dk, dv);
  }
}

}  // namespace tarn::kernels::cpu
