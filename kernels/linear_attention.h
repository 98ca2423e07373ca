#pragma once
// Linear attention (docs/design.md section 2) on raw row-major buffers.
//
//   a = phi(Q): (B, H, Nq, d)   b = phi(K): (B, H, Nk, d)   v: (B, H, Nk, e)
//   out: (B, H, Nq, e)          den: (B, H, Nq)             key_padding_mask: (B, Nk)
//
// With V' = [V | 1] and U = M(a b^T) V' (M the causal mask j <= i, or none):
//   num = U[:, :e], den = U[:, e], out = num / (den + eps).
// Padded keys (mask != 0) count as zero rows of b: they contribute nothing, and a query whose
// keys are all padded gets den = 0 and out = 0 (eps > 0 keeps it finite).
//
// Causal: the chunked scan over chunks of C rows, carrying the f32 state S' = sum b_j v'_j^T
// (d x (e+1)); backward is a forward scan for da and a reverse scan for db, dv, both
// recomputing the states: extra memory is O(C (C + d + e) + d e) per thread, whatever N.
// Bidirectional (and cross-attention, Nq != Nk): S' = b^T V' once, U = a S'.
// The ones column of V' is carried as a separate vector z = sum b_j (den = a z + ...), so
// that the products keep widths that are multiples of the SIMD width.
//
// Parallel over (batch, head) with OpenMP. Workspace: the caller allocates
// *_workspace_floats(...) floats (one share per thread it will use: at most
// omp_get_max_threads() and B*H; 64-byte aligned is best); a smaller one that still holds
// one share runs on fewer threads.
// Causal with B*H < threads: each sequence is also split into segments of at least two
// chunks run on different threads (pass 1 sums each segment's state, pass 3 scans each
// segment from the prefix of those), and the workspace adds (segments - 1) d x (e+1) states
// per slice (twice for backward). A workspace sized without them runs unsplit.
#include <cstddef>
#include <cstdint>

#include "kernels/feature_maps.h"

namespace tarn::kernels::cpu {

constexpr int kDefaultLinearAttentionChunk = 64;
constexpr float kDefaultLinearAttentionEps = 1e-6f;

struct LinearAttentionDims {
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t n_q = 0;  // query positions
  int64_t n_k = 0;  // key / value positions (must equal n_q when causal)
  int64_t d = 0;    // feature dimension of a and b
  int64_t e = 0;    // value dimension
};

struct LinearAttentionConfig {
  bool causal = false;
  const float* key_padding_mask = nullptr;  // (batch, n_k), nonzero = padded; may be null
  float eps = kDefaultLinearAttentionEps;   // > 0
  int chunk = kDefaultLinearAttentionChunk;  // rows per chunk of the causal scan
  // A row-local feature map applied inside the kernel: a and b are then the raw q and k, and
  // backward returns dq and dk. identity: a and b are the features already.
  FeatureMap feature_map = FeatureMap::identity;
};

size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims,
                                                 const LinearAttentionConfig& cfg);
// Writes out (B, H, Nq, e) and den (B, H, Nq), the normaliser backward needs.
void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              const float* a, const float* b, const float* v, float* out,
                              float* den, float* workspace, size_t workspace_floats);

size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims,
                                                  const LinearAttentionConfig& cfg);
// da (B,H,Nq,d), db (B,H,Nk,d), dv (B,H,Nk,e) from dout (B,H,Nq,e) and the forward's out and
// den. Any of da, db, dv may be null when that gradient is not wanted (a null da skips the
// causal forward scan, null db and dv skip the reverse scan). Overwrites, not accumulates.
void linear_attention_backward(const LinearAttentionDims& dims,
                               const LinearAttentionConfig& cfg, const float* a, const float* b,
                               const float* v, const float* out, const float* den,
                               const float* dout, float* da, float* db, float* dv,
                               float* workspace, size_t workspace_floats);

// Forces the number of segments a causal sequence is split into on the CPU (process-wide,
// for tests and benchmarks): 0 = automatic (the default), 1 = never split, n = n segments
// (at most one per chunk) whatever B*H and the thread count. Query the workspace after it.
void linear_attention_set_cpu_sequence_split(int segments);

// ---- Recurrent mode (incremental decoding, docs/design.md section 2) ----
// state: (B, H, d, e+1) f32, row k = [S[k, :e] | z[k]]; start from zeros. One step with the
// new token's a, b: (B, H, d) and v: (B, H, e) adds b v'^T to the state (unless the token is
// padded: key_padding_mask (B), nonzero = padded) and then reads out = a^T S' / (a^T z + eps)
// into out (B, H, e): position by position equal to the causal parallel op. cfg.feature_map
// is applied to a and b as in the parallel op; causal and chunk are ignored.
inline int64_t linear_attention_state_floats(int64_t d, int64_t e) { return d * (e + 1); }
void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                           const float* a, const float* b, const float* v, float* state,
                           float* out);

// Multiply-adds x 2 of the chunked algorithm as implemented, counting the triangular
// intra-chunk products by their nonzero half (r (r + 1) / 2 pairs per chunk of r rows) and
// e' = e + 1 (the normaliser column). Per (batch, head) and chunk of r rows:
//   causal forward            4 r d e' + 2 t (d + e'),  t = r (r + 1) / 2
//   causal backward (dA scan) 4 r d e' + 2 t (d + e')
//   causal backward (dB, dV)  6 r d e' + 4 t (d + e')
//   bidirectional forward     2 Nk d e' + 2 Nq d e'; backward 6 Nk d e' + 4 Nq d e'
// Feature maps and the elementwise work are not counted.
double linear_attention_flops(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                              bool backward);

}  // namespace tarn::kernels::cpu
