#pragma once
// The gated delta rule (Gated DeltaNet, Yang, Kautz & Hatamizadeh, ICLR 2025) on raw row-major
// buffers: a recurrent state S (dk x dv) per (batch, head) slice, written one token at a time
//
//   u_t = S_{t-1}^T k_t                       what the state now stores under k_t  (dv)
//   S_t = alpha_t S_{t-1} + k_t w_t^T,   w_t = beta_t (v_t - alpha_t u_t)
//       = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
//   out_t = S_t^T q_t                         (read after the write: token t sees itself)
//
// With |k_t| = 1 and beta_t in (0, 1) the write replaces a beta_t share of the value stored
// under k_t by v_t instead of adding to it (the delta rule); alpha_t in (0, 1] decays the whole
// state (the gate). The caller normalises q and k and computes beta and alpha; alpha = 1 and
// beta = 0 make a token a no-op (how padding is expressed).
//
// Shapes per slice, slices contiguous: q, k (n, dk); v (n, dv); beta, alpha (n); out (n, dv);
// state (dk, dv). With erase off the write is w_t = beta_t v_t (see DeltaRuleConfig). `reverse` scans from position n-1 down to 0 (the backward half of a
// bidirectional layer); out stays in position order.
//
// Memory: the forward keeps the state at the start of every chunk of `chunk` tokens but the first
// (checkpoints, ceil(n / chunk) - 1 states a slice: the first chunk starts from zero, so a
// sequence of at most `chunk` tokens keeps none); the backward recomputes a chunk's states from
// its checkpoint, so activation memory is O(n dk dv / chunk + chunk dk dv), linear in n.
// Parallel over slices (OpenMP); the workspace holds one share per thread.
#include <cstddef>
#include <cstdint>

namespace tarn::kernels {
enum class DeltaRuleAlgorithm { automatic, recurrent, chunked };
}  // namespace tarn::kernels

namespace tarn::kernels::cpu {

constexpr int64_t kDefaultDeltaRuleChunk = 32;

struct DeltaRuleDims {
  int64_t slices = 1;  // batch x heads
  int64_t n = 0;       // tokens
  int64_t dk = 0;      // key (and query) dimension
  int64_t dv = 0;      // value dimension
};

struct DeltaRuleConfig {
  bool reverse = false;
  int64_t chunk = kDefaultDeltaRuleChunk;  // tokens between checkpoints, >= 1
  // false: no erase, w_t = beta_t v_t, so S_t = alpha_t S_{t-1} + beta_t k_t v_t^T (gated
  // linear attention with a scalar decay, Mamba-2's recurrence).
  bool erase = true;
};

// A slice's checkpoints: the states before tokens chunk, 2 chunk, ... (in scan order).
int64_t delta_rule_checkpoints(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg);
size_t delta_rule_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg);

// q and out may both be null (no readout: the cross-attention writer); final_state (slices,
// dk, dv) may be null; checkpoints (slices, delta_rule_checkpoints, dk, dv) may be null when no
// backward will follow.
void delta_rule_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                        const float* v, const float* beta, const float* alpha, float* out, float* final_state,
                        float* checkpoints);

// Gradients given d_out (null when the forward had no readout) and d_final_state (null: zero).
// dq is null without readout. Every output is overwritten.
void delta_rule_backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k,
                         const float* v, const float* beta, const float* alpha, const float* checkpoints,
                         const float* d_out, const float* d_final_state, float* dq, float* dk, float* dv,
                         float* d_beta, float* d_alpha, float* workspace, size_t workspace_floats);

// The CPU scans run one of two algorithms (delta_rule_set_algorithm; process-wide, for tests and
// benches): the recurrence above, token by token, or the chunked (WY) form of Yang et al.
// (NeurIPS 2024; docs/design.md section 2), which turns each chunk of `chunk` tokens into
// products of chunk x chunk and chunk x d matrices (chunk <= kMaxChunkedDeltaRuleChunk) on the
// attention kernels' tile GEMM. automatic: a sequence of at most kAutomaticChunkedDeltaRuleTokens
// runs chunked as one chunk, whatever cfg.chunk (the checkpoints' states are taken inside it), a
// longer one the recurrence. A single chunk starts from a zero state and (read out, no
// d_final_state) ends with a zero gradient, so the chunked form's d^2 terms vanish: it costs
// about 10 n d FLOPs a token against the recurrence's 27 d^2. Measured at about 2,048 tokens x 4
// heads, d = 64 (tarn bench attention --algos delta_causal,delta_causal_recurrent --n N --batch
// 2048/N --heads 4; AMD EPYC, 2 threads, medians of 4-6 alternating runs), forward+backward:
// N = 16, 3.2 ms against 5.8; N = 32, 5.5 against 7.6; N = 48, 6.9 against 9.1; N = 64, 8.9
// against 9.1. Over many chunks (N = 2,048, B*H = 4) the chunked form ran 41-48 ms against the
// recurrence's 29-32 (chunk 32; 41-58 against 32-40 with chunk 64): its d^2 products on 32 x 64
// operands do not reach the recurrence's fused passes. Both are deterministic; they agree within
// f32 rounding, not bit for bit.
void delta_rule_set_algorithm(DeltaRuleAlgorithm algorithm);
constexpr int64_t kMaxChunkedDeltaRuleChunk = 64;
constexpr int64_t kAutomaticChunkedDeltaRuleTokens = 48;

// One token of the causal recurrence for decoding: updates state (slices, dk, dv) in place with
// q, k (slices, dk), v (slices, dv), beta, alpha (slices) and writes out (slices, dv) = S^T q.
// Equal to the forward's row for that token.
void delta_rule_step(int64_t slices, int64_t dk, int64_t dv, float* state, const float* q, const float* k,
                     const float* v, const float* beta, const float* alpha, float* out, bool erase = true);

}  // namespace tarn::kernels::cpu
