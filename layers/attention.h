#pragma once
// Multi-head attention as HF's BartAttention (parameters k_proj, v_proj, q_proj, out_proj, in
// that order), computing either softmax attention (q scaled by head_dim^-0.5 after its
// projection, as HF does) or linear attention with a feature map (docs/design.md section 2: no
// scaling, the feature map sets the similarity). Self-attention passes the same tensor as
// query and key/value; cross-attention passes the encoder output as key/value.
//
// The attention itself is framework/ops/attention.h: softmax_attention (blocked, no N x N
// matrix) and linear_attention (chunked causal scan; elu1/relu/exp fused into the kernel).
// Only softmax attention with attention dropout active (training, p > 0) builds the N x N
// probabilities, as HF does, to drop them; linear attention has no probabilities and ignores
// attention_dropout.
//
// Taylor (Based, Arora et al. 2024): a learned (taylor_dim, dh) projection per attention module,
// shared by its heads ("taylor_proj.weight"), then the Taylor map of exp to order taylor_order
// (kernels/taylor_map.h: C(r + P, P) features; r = 16, P = 2: 153).
// Hedgehog (Zhang et al., ICLR 2024): per head a learned (dh, dh) matrix for the queries and one
// for the keys ("hedgehog_q", "hedgehog_k", (H, dh, dh), the identity at the start), then
// [softmax(p), softmax(-p)] over the features of p (2 dh features): trained with the model,
// not distilled from softmax attention as the paper does.
// FAVOR+: one (m, dh) projection per attention module, shared by its heads, kept as the buffer
// "favor_projection" and redrawn by favor_step() every favor_redraw_every steps. Queries use
// the op's per-row stabiliser; keys use the per-(batch, head) one, except in causal
// self-attention, where keys are unstabilised (exp(W k' - |k'|^2 / 2) / sqrt(m)): a
// stabiliser taken over all positions would differ from what step-by-step decoding can see.
// Shapes: hidden states (B, N, D); inside, (B, H, N, dh) with D = H * dh.
// Key padding masks are B*Nk bytes, row-major (b, j), nonzero = padding; empty = no padding.
//
// Decoding: an AttentionCache holds what later steps need.
//   self-attention, softmax: K and V of every position so far, (B, H, t, dh), one more each step;
//   self-attention, linear:  the recurrent state S' = Σ_j φ(k_j)ᵀ [v_j | 1], (B, H, f, dh+1):
//                            O(f dh) per token whatever t is (docs/design.md section 2, RNN mode);
//   cross-attention:         K, V of the encoder output (softmax) or its summary S' (linear),
//                            computed once by precompute_cross(); with align_decay, φ(K) and
//                            [V | 1] themselves, each target position weighing them by its own
//                            decays (O(Nk f) per token, as softmax's O(Nk dh)).
//   delta (layers/delta_rule_block.h): the state S (B, H, dh, dh) in `state`, and in
//                            self-attention the last conv_size - 1 projected inputs of q, k
//                            and v for the convolutions (q_tail, k_tail, v_tail, (B, taps-1, D)).
//
// Hybrid attention (the linear-attention seed's hybrid layer): the same q,
// k, v projections feed softmax attention over a sliding window (framework/ops/attention.h:
// causal, the last `window` keys; bidirectional, |i - j| <= window / 2) and a global part over
// the whole sequence: linear attention with the feature map (global: linear), or the delta or
// gated layer's output before out_proj (global: delta | gated; its convolutions, normalisation,
// gates and output norm as kind delta has them, in the "delta" submodule). Per head and position
// a gate g = σ(x W_g^T + b_g) ("hybrid_gate", a (H, D) weight and an H bias, on the layer's
// input x) mixes them before out_proj: ctx = g local + (1 - g) global. Decoding keeps the last
// `window` keys and values and the global state: O(window + f dh) (or O(window + dh^2) over
// delta) per token, whatever the position. In cross-attention (global linear only) target
// position i's window is the source keys with |i - j| <= window / 2; decoding keeps the source's
// keys and values and reads the window around each position (step_cross's `position`).
//
// Aligned cross-attention (kind linear, align_decay γ > 0; docs/design.md): target position i
// weighs source position j by γ_h^|i - j| on top of φ(q_i)·φ(k_j), with γ_0 = 1 (the whole
// source) and γ_h = γ^(2^(h-1)) for heads h >= 1: a prior, linear in length, that a denoising
// target copies its source near the diagonal. Computed by chunks of `chunk` positions: the
// decay-masked products within a chunk, and between chunks states of φ(K)ᵀ [V | 1] weighted to
// the chunk's ends and mixed by the decays across chunk boundaries (GEMMs only).
//
// Gated aligned cross-attention (align_gate, issue 53): the same φ(q), φ(k), v read twice, by
// the decays (aligned_context) and plainly over the whole source (linear attention), mixed per
// head and target position by g = σ(x W_g^T + b_g) ("align_gate", (H, D) and H, on the layer's
// input x): g aligned + (1 - g) plain. Decoding keeps φ(K), [V | 1] and the plain state S'.
//
// Delta attention: causal self-attention is the gated delta rule's scan read at every token;
// the encoder's bidirectional self-attention sums a forward and a reverse scan (each token is
// read by both); cross-attention writes the encoder output into one state per (batch, head)
// with the scan and every target position reads it: o = S^T q.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/module.h"
#include "framework/ops/attention.h"
#include "framework/ops/delta_rule.h"
#include "layers/config.h"
#include "layers/delta_rule_block.h"
#include "layers/dropout.h"
#include "layers/linear.h"

namespace tarn {

using PaddingMask = std::vector<uint8_t>;  // (B, N) row-major, nonzero = padding; empty = none

// Copying a cache aliases its tensors, and a linear self-attention step updates `state` in
// place: use clone() for an independent copy.
struct AttentionCache {
  Tensor key, value;    // softmax: (B, H, Nk, dh); aligned cross-attention: φ(K) (B, H, Nk, f), [V | 1]
  Tensor key_padding;   // softmax cross-attention: (B, Nk) f32, 1 = padded; may be undefined
  Tensor state;         // linear: S' (B, H, f, dh + 1), row k = [S[k, :dh] | z[k]]; delta: S (B, H, dh, dh)
  Tensor q_tail, k_tail, v_tail;  // delta self-attention (and hybrid over delta): the convolutions' last inputs
  int64_t length = 0;   // keys seen (self-attention: positions decoded so far)
  bool defined() const { return key.defined() || state.defined(); }
};

// Rows of every tensor in `cache` reordered along the batch axis: row i <- row indices[i]
// (beam search). indices may repeat rows and change the batch size.
void reorder(AttentionCache& cache, const std::vector<int64_t>& indices);
AttentionCache clone(const AttentionCache& cache);

// (B, N) flags -> (B, N) f32 tensor, 1 = padded, as the attention ops take it; undefined when
// `pad` is empty.
Tensor padding_tensor(const PaddingMask& pad, int64_t batch, int64_t length, Device device = Device::cpu());

// Attention transfer (linearizing, docs/design.md section 8): while a module is given one, its
// forward() also runs softmax attention on the same projections (the teacher, without autograd),
// appends the mean squared difference of its own output from the teacher's as a term, and returns
// the teacher's output, so that every layer sees what the softmax model would feed it and each
// term trains only its own module's parameters (Hedgehog, Zhang et al. 2024; LoLCATs, 2024).
struct AttentionTransfer {
  struct Term {
    std::string name;  // the module, "model.encoder.layers.0.self_attn"
    Tensor loss;       // shape (): mean over (B, N, D) of (own output - teacher's)^2
  };
  std::vector<Term> terms;  // in forward order, one per non-softmax module per forward
};

class MultiHeadAttention : public Module {
 public:
  // `cross`: the module attends from the decoder to the encoder (decides what delta attention
  // convolves and how it reads; the other kinds need not know).
  MultiHeadAttention(int64_t d_model, int64_t heads, const AttentionConfig& config, bool causal,
                     float attention_dropout, ParamInit& init, DropoutStreams& dropout, bool cross = false);

  // query: (B, Nq, D); key_value: (B, Nk, D); key_padding: (B, Nk) flags or empty -> (B, Nq, D).
  Tensor forward(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding = {}) const;

  // Attention transfer (above); null stops it. A softmax module records nothing.
  void set_transfer(AttentionTransfer* transfer, std::string name) {
    transfer_ = transfer;
    transfer_name_ = std::move(name);
  }
  // Softmax attention of this module's projections, q scaled by head_dim^-1/2 as HF does, no
  // dropout: what the module computed before its kind was replaced.
  Tensor softmax_teacher(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding) const;

  // Decoding (no autograd). A self-attention cache for `batch` rows before the first token.
  AttentionCache start_self(int64_t batch) const;
  // One new position of self-attention: query (B, 1, D) is also the new key/value; appends it
  // to the cache and returns (B, 1, D), equal to row t of the causal forward.
  Tensor step_self(const Tensor& query, AttentionCache& cache) const;
  // Cross-attention: the encoder's keys/values (or their summary), once per source batch.
  AttentionCache precompute_cross(const Tensor& key_value, const PaddingMask& key_padding) const;
  // query (B, 1, D) against a precomputed cross cache -> (B, 1, D).
  // position: the target position of the query row (hybrid's window is around it; other kinds
  // ignore it).
  Tensor step_cross(const Tensor& query, const AttentionCache& cache, int64_t position = -1) const;

  // FAVOR+ only (null otherwise): the projection, its RNG position and its redraw counter.
  // A checkpoint keeps `w` (also a buffer), `rng` and `steps`.
  FavorProjection* favor() { return favor_.w.defined() ? &favor_ : nullptr; }
  const FavorProjection* favor() const { return favor_.w.defined() ? &favor_ : nullptr; }

  const AttentionConfig& config() const { return config_; }
  int64_t heads() const { return heads_; }
  int64_t head_dim() const { return head_dim_; }
  bool causal() const { return causal_; }
  int64_t feature_dim() const;  // f: columns of φ(q) (head_dim, or m for favor)

  // Declared in HF's order, which fixes named_parameters()' order.
  Linear k_proj, v_proj, q_proj, out_proj;

 private:
  Tensor own_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding) const;
  Tensor split_heads(const Tensor& x) const;  // (B, N, D) -> (B, H, N, dh)
  Tensor merge_heads(const Tensor& x) const;  // (B, H, N, dh) -> (B, N, D)
  // φ for the paths that need features materialised: (B, H, N, dh) -> (B, H, N, f).
  Tensor query_features(const Tensor& q) const;
  Tensor key_features(const Tensor& k) const;
  // The map the linear-attention kernel applies itself (identity when features come in).
  FeatureMap fused_map() const;
  // favor and taylor: the layer computes the features and hands them to the kernels.
  bool materialises_features() const { return map_ == FeatureMap::favor || kernels::cpu::feature_map_is_learned(map_); }
  // Based's map to order P of p = x taylor_proj^T (r = taylor_dim wide): phi(q).phi(k) =
  // sum_{n <= P} x^n / n! with x = q'.k' / sqrt(r), exp's Taylor series (taylor_feature_map).
  Tensor taylor_features(const Tensor& x) const;
  // Hedgehog's map (Zhang et al. 2024): [softmax(p), softmax(-p)] over the features of
  // p = x W_h^T with W_h the head's (dh, dh) slice of `w` (H, dh, dh): 2 dh features.
  Tensor hedgehog_features(const Tensor& x, const Tensor& w) const;
  Tensor softmax_with_dropout(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad,
                              int64_t window) const;
  // Per-head contexts (B, H, Nq, dh) from split q, k, v: softmax (window 0 = every key) and linear.
  Tensor softmax_context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad,
                         int64_t window) const;
  // x: the layer's query input (B, Nq, D), for align_gate's gate.
  Tensor linear_context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad,
                        const Tensor& x = Tensor()) const;
  // Linear cross-attention with align_decay: target row i weighs source row j by γ_h^|i - j|.
  Tensor aligned_context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // Decoding: target `position`'s row against the cached source features φ(K) and [V | 1].
  Tensor aligned_step_cross(const Tensor& q, const AttentionCache& cache, int64_t position) const;
  // Hybrid: g local + (1 - g) global with g = σ(hybrid_gate(x)) per head and position; x (B, N, D).
  Tensor hybrid_mix(const Tensor& local, const Tensor& global, const Tensor& x) const;
  // align_gate: g aligned + (1 - g) plain with g = σ(align_gate(x)); aligned and plain (B, H, N, dh).
  Tensor align_mix(const Tensor& aligned, const Tensor& plain, const Tensor& x) const;
  // Decoding's softmax over cached keys and values (B, H, Nk, dh), every one visible but padded
  // keys (key_padding (B, Nk), may be undefined); hybrid cross-attention's window of them around
  // the target position.
  Tensor softmax_step(const Tensor& q, const Tensor& key, const Tensor& value, const Tensor& key_padding) const;
  Tensor window_step_cross(const Tensor& q, const AttentionCache& cache, int64_t position) const;
  Tensor delta_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const;
  // Self-attention's delta (or gated) output before out_proj, (B, N, D): the projections qp, kp,
  // vp (B, N, D) of the layer's input x convolved, normalised and scanned (both ways in the
  // encoder), then finish()ed. Kind delta and hybrid's global part alike.
  Tensor delta_self_output(const Tensor& qp, const Tensor& kp, const Tensor& vp, const Tensor& x,
                           const PaddingMask& pad) const;
  // Its decoding step: x (B, 1, D) and its projections; updates the cache's state and tails.
  Tensor delta_step_output(const Tensor& qp, const Tensor& kp, const Tensor& vp, const Tensor& x,
                           AttentionCache& cache) const;
  // The writer's convolved, normalised k and v (B, H, N, dh), with beta and alpha (B, H, N).
  struct DeltaWrite {
    Tensor k, v, beta, alpha;
  };
  DeltaWrite delta_write(const Tensor& key_value, const PaddingMask& pad) const;
  // The scans' options: this module's chunk and kind, its precision (bf16 kernels where the
  // device has them, framework/ops/delta_rule.h), `reverse` for the backward half of a
  // bidirectional layer.
  DeltaRuleOptions delta_options(bool reverse) const;

  AttentionConfig config_;
  FeatureMap map_ = FeatureMap::identity;
  FavorProjection favor_;
  std::unique_ptr<Linear> taylor_proj_;  // taylor only: (r, dh), registered as "taylor_proj"
  Tensor hedgehog_q_, hedgehog_k_;        // hedgehog only: (H, dh, dh) each, "hedgehog_q" and "hedgehog_k"
  int64_t heads_, head_dim_;
  bool causal_, cross_;
  std::unique_ptr<DeltaRuleBlock> delta_;  // delta, gated and hybrid over them: registered as "delta"
  std::unique_ptr<Linear> hybrid_gate_;    // kind hybrid only: (H, D) and (H), registered as "hybrid_gate"
  std::unique_ptr<Linear> align_gate_;     // align_gate only: (H, D) and (H), registered as "align_gate"
  float attention_dropout_;
  AttentionTransfer* transfer_ = nullptr;
  std::string transfer_name_;
  float scaling_;
  DropoutStreams* dropout_;
};

}  // namespace tarn
