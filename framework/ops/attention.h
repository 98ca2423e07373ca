#pragma once
// Attention ops with autograd (docs/design.md section 2): feature maps, linear attention (causal
// chunked scan, bidirectional, cross), its recurrent step for decoding, and the softmax
// baseline. Each runs a hand-written CPU kernel forward and backward (kernels/
// linear_attention.h, feature_maps.h, softmax_attention.h); workspaces are Tensors, so
// memory_stats() sees them.
//
// Shapes: q, k, a = phi(q), b = phi(k): (B, H, N, d); v: (B, H, Nk, e); out: (B, H, Nq, e);
// key_padding_mask: (B, Nk) f32, 1 = padded key (0 = real token).
#include <cstdint>
#include <string>

#include "framework/precision.h"
#include "framework/rng.h"
#include "framework/tensor.h"
#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"

namespace tarn {

using kernels::cpu::FeatureMap;
using kernels::cpu::feature_map_name;  // "elu1", "relu", "exp", "favor", "identity"

// The inverse of feature_map_name; anything else throws naming the choices.
FeatureMap parse_feature_map(const std::string& name);

// ---- FAVOR+ projection: random state that checkpoints must keep ----

// An (m, d) block-orthogonal Gaussian projection drawn from `rng` (advances it).
Tensor draw_favor_projection(Philox& rng, int64_t m, int64_t d);

// The projection with its redraw policy. Save `w`, `rng` and `steps` in a checkpoint: a
// resumed run then uses the same projection and redraws at the same steps.
struct FavorProjection {
  int64_t m = 256;
  int64_t d = 64;
  int64_t redraw_every = 0;  // redraw after this many training steps; 0 = never
  RngState rng;              // where the next draw comes from
  int64_t steps = 0;         // steps since the last draw
  Tensor w;                  // (m, d)

  // Draws w from `rng` (state) now.
  void draw();
  // Counts one training step and redraws when redraw_every steps have passed since the
  // last draw. Returns whether it redrew.
  bool step();
};

// Which stabiliser favor uses (kernels/feature_maps.h): queries subtract their row max,
// keys one max per (batch, head); both cancel in the attention output (up to eps).
// `unstabilized` subtracts nothing (the plain estimator of exp(q.k/sqrt(d))): a key's
// features then do not depend on the other keys, so recurrent decoding (one key at a time)
// computes exactly what the parallel op does; exp may overflow when |w_j|^2 / 2 > 88, which
// a Gaussian row reaches only for d well above 64.
enum class FeatureRole : uint8_t { query, key, unstabilized };

// phi applied row-wise to x (..., N, d) -> (..., N, d), or (..., N, m) for favor with
// `projection` (m, d). identity logs a warning once (it degenerates to mean pooling).
// Differentiable with respect to x (not the projection).
Tensor feature_map(const Tensor& x, FeatureMap kind, FeatureRole role = FeatureRole::query,
                   const Tensor& projection = Tensor());

// Based's Taylor map to order `order` (kernels/taylor_map.h): p (..., r) -> (..., F) with
// F = C(r + order, order) = taylor_feature_count(r, order) and phi(p) . phi(p') = sum_{n <=
// order} x^n / n!, x = p . p' / sqrt(r). Differentiable with respect to p. r <= 255, order 1-4.
Tensor taylor_feature_map(const Tensor& p, int order);

// ---- linear attention ----

struct LinearAttentionOptions {
  bool causal = false;
  Tensor key_padding_mask;  // (B, Nk), 1 = padded; undefined = no padding
  float eps = kernels::cpu::kDefaultLinearAttentionEps;
  int chunk = kernels::cpu::kDefaultLinearAttentionChunk;
  // A row-local map (elu1, relu, exp) applied inside the kernel: then the op takes the raw
  // q and k and never stores phi(q), phi(k) or their gradients (less memory, one pass less).
  // identity: the inputs are already features.
  FeatureMap fused_feature_map = FeatureMap::identity;
  // bf16: where the device has bf16 linear-attention kernels (CUDA: kernels/cuda_linear_attention_bf16.h,
  // d and e up to 256), a, b and v are rounded to bf16 and the scan runs on tensor cores with f32
  // state, normaliser and accumulation; out and the gradients come back as f32 tensors. Elsewhere
  // (the CPU) the f32 kernel runs: linear_attention_runs_in_bf16 says which.
  Precision precision = Precision::f32;
};

// Whether linear_attention with precision bf16 runs the bf16 kernels on `device` for head
// dimensions d and e (else it runs in f32).
bool linear_attention_runs_in_bf16(Device device, int64_t d, int64_t e);

// out = (M(a b^T) V) / (M(a b^T) 1 + eps) with M the causal mask or none (a: (B,H,Nq,d),
// b: (B,H,Nk,d), v: (B,H,Nk,e)); Nq != Nk only without causal. Saves out and the normaliser
// (B,H,Nq) for backward, which recomputes the chunk states: memory is linear in N.
Tensor linear_attention(const Tensor& a, const Tensor& b, const Tensor& v,
                        const LinearAttentionOptions& opt = {});

// Recurrent mode for decoding: S' per (batch, head), (B, H, d, e+1) f32.
struct LinearAttentionState {
  Tensor s;
  int64_t steps = 0;
  static LinearAttentionState zeros(int64_t batch, int64_t heads, int64_t d, int64_t e);
};

struct LinearAttentionStepOptions {
  Tensor key_padding_mask;  // (B): 1 = this step's token is padding; undefined = none
  float eps = kernels::cpu::kDefaultLinearAttentionEps;
  FeatureMap fused_feature_map = FeatureMap::identity;  // as in LinearAttentionOptions
};

// One token: a, b (B, H, d) or (B, H, 1, d); v (B, H, e) or (B, H, 1, e). Adds b v'^T to the
// state, returns out (B, H, e), equal to the causal op's output at this position. No autograd.
Tensor linear_attention_step(LinearAttentionState& state, const Tensor& a, const Tensor& b,
                             const Tensor& v, const LinearAttentionStepOptions& opt = {});

// ---- softmax attention (the baseline) ----

struct SoftmaxAttentionOptions {
  bool causal = false;
  Tensor key_padding_mask;  // (B, Nk), 1 = padded
  float scale = 0.0f;       // 0 = 1/sqrt(d)
  // Sliding window: 0 = every key; w > 0: causal, the last w keys (j in (i - w, i]);
  // bidirectional, |i - j| <= w / 2 (also across two sequences, Nq != Nk: the keys around the
  // query's own position). Time O(N w), memory as without.
  int64_t window = 0;
  // bf16: where the device has bf16 softmax-attention kernels (CUDA: kernels/cuda_softmax_attention_bf16.h,
  // d and e up to 128), q, k and v are rounded to bf16 and the tile products run on tensor cores,
  // the softmax and lse in f32; out and the gradients come back as f32 tensors. Elsewhere (the
  // CPU) the f32 kernel runs: softmax_attention_runs_in_bf16 says which.
  Precision precision = Precision::f32;
};

// Whether softmax_attention with precision bf16 runs the bf16 kernels on `device` for head
// dimensions d and e (else it runs in f32).
bool softmax_attention_runs_in_bf16(Device device, int64_t d, int64_t e);

// softmax(scale q k^T + masks) v, blocked (no N x N matrix), with backward.
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const SoftmaxAttentionOptions& opt = {});

}  // namespace tarn
