#pragma once
// Kind softmax: exact attention, q scaled by head_dim^-1/2 after its projection as HF does
// (framework/ops/attention.h: blocked, no N x N matrix). Only with attention dropout active
// (training, p > 0) does it build the N x N probabilities, as HF does, to drop them. With a
// window (hybrid's local part, layers/attention/hybrid.h) each query sees the keys the window
// shows it: causal, the last `window`; bidirectional and cross, |i - j| <= window / 2.
// Decoding keeps the keys and values seen so far (within a window: the last `window`).
#include <cstdint>

#include "layers/attention/kind.h"

namespace tarn {

struct KeyValueState : DecodeStateOf<KeyValueState> {
  Tensor key, value;   // (B, H, Nk, dh)
  Tensor key_padding;  // cross-attention: (B, Nk) f32, 1 = padded; may be undefined
  std::vector<Tensor*> tensors() override { return {&key, &value, &key_padding}; }
};

class SoftmaxAttention : public AttentionKindLayer {
 public:
  // window 0: every key.
  explicit SoftmaxAttention(AttentionSite& site, int64_t window = 0);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;
  bool learns_from_softmax_teacher() const override { return false; }

  // Decoding: keys and values of `tokens` positions, 4 bytes each.
  static double kv_bytes(const AttentionSizes& s, double tokens) { return 2 * 4.0 * tokens * s.d_model; }
  // Training under attention dropout: HF's composed path keeps at least P and its dropped copy,
  // 2 x 4 bytes per head and query-key pair (hybrid's window takes that path too).
  static AttentionTrainingBytes training_bytes(const AttentionConfig&, const AttentionSizes& s, const AttentionBatch& b) {
    return {b.dropout ? 8.0 * s.heads * b.tokens * b.keys : 0.0, 0.0};
  }
  // Self-attention's cache grows by concatenation: the old and the new cache live at once.
  static double decode_state_bytes(const AttentionConfig&, const AttentionSizes& s, double tokens) {
    return (s.cross ? 1.0 : 2.0) * kv_bytes(s, tokens);
  }

  // The same per head: split q (B, H, Nq, dh), k and v (B, H, Nk, dh) -> (B, H, Nq, dh).
  Tensor context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  Tensor step_self_heads(const Tensor& q, const Tensor& k, const Tensor& v, KeyValueState& s) const;
  Tensor step_cross_heads(const Tensor& q, const KeyValueState& s, int64_t position) const;

 private:
  // HF's path, kept for attention dropout: it needs the probabilities themselves.
  Tensor with_dropout(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // Softmax over cached keys and values, every one visible but padded keys.
  Tensor step(const Tensor& q, const Tensor& key, const Tensor& value, const Tensor& key_padding) const;

  const AttentionSite& site_;
  int64_t window_;
  float scaling_;
};

}  // namespace tarn
