#pragma once
// Aligned cross-attention (kind linear with align_decay γ > 0; docs/design.md "Aligned
// cross-attention"): target position i weighs source position j by γ_h^|i - j| on top of
// φ(q_i)·φ(k_j), with γ_0 = 1 (the whole source) and γ_h = γ^(2^(h-1)) for heads h >= 1: a prior,
// linear in length, that a denoising target copies its source near the diagonal. Computed by
// chunks of `chunk` positions: the decay-masked products within a chunk, and between chunks
// states of φ(K)ᵀ [V | 1] weighted to the chunk's ends and mixed by the decays across chunk
// boundaries (GEMMs only).
//
// With align_gate (issue 53) the same φ(q), φ(k), v are read twice, by the decays and plainly
// over the whole source (linear attention), mixed per head and target position by
// g = σ(x W_g^T + b_g) ("align_gate", (H, D) and H, on the layer's input x):
// g aligned + (1 - g) plain.
//
// Decoding keeps φ(K) and [V | 1] themselves, each target position weighing them by its own
// decays (O(Nk f) per token, as softmax's O(Nk dh)), and with the gate the plain read's S'.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "layers/attention/common.h"
#include "layers/attention/linear.h"

namespace tarn {

struct AlignedState : DecodeStateOf<AlignedState> {
  Tensor key;    // φ(K) (B, H, Nk, f), padded rows zero
  Tensor value;  // [V | 1] (B, H, Nk, dh + 1)
  Tensor plain;  // align_gate: the plain read's S' (B, H, f, dh + 1)
  std::vector<Tensor*> tensors() override { return {&key, &value, &plain}; }
};

class AlignedCrossAttention : public AttentionKindLayer {
 public:
  explicit AlignedCrossAttention(AttentionSite& site);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;
  FavorProjection* favor() override { return plain_->favor(); }

  // Estimates: align_gate's (H, D) weight and H bias, and the feature map's parameters.
  static double parameters(const AttentionConfig& a, const AttentionSizes& s) {
    const double gate = a.align_gate ? s.d_model * std::max(1.0, s.heads) + std::max(1.0, s.heads) : 0.0;
    return gate + LinearAttention::parameters(a, s);
  }
  // Training: linear attention's, and each chunk's C x C decay-masked scores, C = chunk up to the
  // longest sequence: tokens x heads x C values.
  static AttentionTrainingBytes training_bytes(const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b) {
    AttentionTrainingBytes t = LinearAttention::training_bytes(a, s, b);
    t.kept += 4 * b.tokens * std::max(1.0, s.heads) * std::min(static_cast<double>(a.chunk), b.longest);
    return t;
  }

 private:
  // Target row i weighs source row j by γ_h^|i - j|: split q, k, v -> (B, H, Nq, dh).
  Tensor context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // Decoding: target `position`'s row against the cached φ(K) and [V | 1].
  Tensor step_heads(const Tensor& q, const AlignedState& s, int64_t position) const;

  const AttentionSite& site_;
  std::unique_ptr<HeadGate> gate_;         // align_gate only, registered before the feature map's parameters
  std::unique_ptr<LinearAttention> plain_;  // the feature map, and the gate's plain read
};

}  // namespace tarn
