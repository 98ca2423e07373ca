#pragma once
// Kind hybrid (the linear-attention seed's hybrid layer): the same q, k, v projections feed
// softmax attention over a sliding window (causal: the last `window` keys; bidirectional,
// |i - j| <= window / 2) and a global part over the whole sequence: linear attention with the
// feature map (global: linear), or the delta or gated layer (global: delta | gated; its
// convolutions, normalisation, gates and output norm in the "delta" submodule). Per head and
// position a gate g = σ(x W_g^T + b_g) ("hybrid_gate", a (H, D) weight and an H bias, on the
// layer's input x) mixes them before out_proj: ctx = g local + (1 - g) global. Decoding keeps
// the last `window` keys and values and the global part's state: O(window + f dh) (or
// O(window + dh^2) over delta) per token, whatever the position. In cross-attention (global
// linear only) target position i's window is the source keys with |i - j| <= window / 2;
// decoding keeps the source's keys and values and reads the window around each position.
#include <memory>

#include "framework/io/json.h"

#include "layers/attention/common.h"
#include "layers/attention/softmax.h"

namespace tarn {

struct HybridState : DecodeState {
  KeyValueState local;
  std::unique_ptr<DecodeState> global;
  std::vector<Tensor*> tensors() override;
  std::unique_ptr<DecodeState> copy() const override;
};

class HybridAttention : public AttentionKindLayer {
 public:
  explicit HybridAttention(AttentionSite& site);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;
  FavorProjection* favor() override { return global_->favor(); }

  // Estimates: the gate's (H, D) weight and H bias and the global part's parameters. Decoding
  // keeps the global part's state and the keys and values its window may read (self: the last
  // `window`; cross: every source key, the window moving with the target position); the self
  // cache grows by concatenation.
  static double parameters(const AttentionConfig& a, const AttentionSizes& s);
  static double decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens);
  // Training: the window's (softmax under attention dropout) and, over linear, the feature map's.
  static AttentionTrainingBytes training_bytes(const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b);
  // The export: window and global, then the global part's settings.
  static void export_settings(const AttentionConfig& a, json::Json& o);

 private:
  // g local + (1 - g) global: local (B, H, N, dh), global (B, N, D) -> (B, N, D).
  Tensor mix(const Tensor& local, const Tensor& global, const Tensor& x) const;

  const AttentionSite& site_;
  SoftmaxAttention local_;
  std::unique_ptr<AttentionKindLayer> global_;
  std::unique_ptr<HeadGate> gate_;
};

}  // namespace tarn
