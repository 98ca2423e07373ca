#pragma once
// Kind linear: feature-map attention (Katharopoulos et al.), out_i = φ(q_i) Σ_j φ(k_j)ᵀ v_j
// normalised by φ(q_i) Σ_j φ(k_j), no scaling (the feature map sets the similarity;
// docs/design.md section 2). The causal scan and the bidirectional and cross forms are
// framework/ops/attention.h's linear_attention, φ fused into the kernel for the row-local maps.
// Decoding keeps the recurrent state S' = Σ_j φ(k_j)ᵀ [v_j | 1], (B, H, f, dh + 1): O(f dh)
// per token whatever the position; cross-attention keeps the source's S', computed once.
// With align_decay (cross-attention only) the linear kind builds layers/attention/aligned.h.
#include <cstdint>

#include "framework/io/json.h"
#include "layers/attention/feature_map.h"
#include "layers/attention/kind.h"

namespace tarn {

struct LinearState : DecodeStateOf<LinearState> {
  Tensor s;  // S' (B, H, f, dh + 1), row k = [S[k, :dh] | z[k]]
  std::vector<Tensor*> tensors() override { return {&s}; }
};

class LinearAttention : public AttentionKindLayer {
 public:
  explicit LinearAttention(AttentionSite& site);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;
  FavorProjection* favor() override { return features_.favor(); }

  // Per head: split q (B, H, Nq, dh), k and v (B, H, Nk, dh) -> (B, H, Nq, dh).
  Tensor context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // φ(K) with padded keys' rows zero (docs/design.md section 2): k (B, H, Nk, dh) -> (B, H, Nk, f).
  Tensor masked_key_features(const Tensor& k, const PaddingMask& pad) const;
  // S' = φ(K)ᵀ [V | 1] over masked_key_features, (B, H, f, dh + 1).
  Tensor summary(const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // φ(q) S' normalised: q (B, H, Nq, dh) -> (B, H, Nq, dh).
  Tensor read(const Tensor& q, const Tensor& summary) const;
  const FeatureMapLayer& features() const { return features_; }

  // Estimates: the feature map's parameters; decoding keeps S and z, (H, f, dh + 1) in f32
  // (aligned cross-attention keeps φ(K) and [V | 1]; counted as S' here, a lower bound).
  static double parameters(const AttentionConfig& a, const AttentionSizes& s) {
    return FeatureMapLayer::parameters(a, s);
  }
  static double decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens);
  // Training: a feature map wider than the head (FAVOR+'s m, Taylor's C(r + P, P), Hedgehog's
  // 2 head_dim) has the tape keep φ(q) and φ(k) of every token, the features past the head's
  // width on top of the projections; the scan holds a state of features x (head_dim + 1) per head.
  static AttentionTrainingBytes training_bytes(const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b);
  // The export: the feature map's settings, and aligned cross-attention's decay and gate.
  static void export_settings(const AttentionConfig& a, json::Json& o);

 private:
  const AttentionSite& site_;
  FeatureMapLayer features_;
};

}  // namespace tarn
