#pragma once
// Linear attention's feature map φ with its parameters (docs/design.md section 2), for the
// kinds that use one: linear, aligned cross-attention and hybrid over linear.
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
// The row-local maps (elu1, relu, exp, identity) are applied inside the linear-attention
// kernels (fused_map()); the others are computed here and handed to the kernels as features.
#include <cstdint>
#include <memory>

#include "layers/attention/kind.h"
#include "layers/linear.h"

namespace tarn {

class FeatureMapLayer {
 public:
  explicit FeatureMapLayer(AttentionSite& site);

  // (B, H, N, dh) -> (B, H, N, f).
  Tensor query_features(const Tensor& q) const;
  Tensor key_features(const Tensor& k) const;
  // The map the linear-attention kernel applies itself (identity when features come in).
  FeatureMap fused_map() const { return materialises() ? FeatureMap::identity : map_; }
  // favor, taylor and hedgehog: the layer computes the features and hands them to the kernels.
  bool materialises() const;
  int64_t feature_dim() const { return feature_dim_; }  // f
  FavorProjection* favor() { return favor_.w.defined() ? &favor_ : nullptr; }

  // Estimates from the settings alone: Taylor's r x head_dim projection, Hedgehog's two
  // H x head_dim x head_dim maps; FAVOR+'s m x head_dim projection (a buffer).
  static double parameters(const AttentionConfig& a, const AttentionSizes& s);
  static double buffer_values(const AttentionConfig& a, const AttentionSizes& s);

 private:
  // Based's map to order P of p = x taylor_proj^T (r = taylor_dim wide): phi(q).phi(k) =
  // sum_{n <= P} x^n / n! with x = q'.k' / sqrt(r), exp's Taylor series (taylor_feature_map).
  Tensor taylor_features(const Tensor& x) const;
  // Hedgehog's map: [softmax(p), softmax(-p)] over the features of p = x W_h^T with W_h the
  // head's (dh, dh) slice of `w` (H, dh, dh): 2 dh features.
  Tensor hedgehog_features(const Tensor& x, const Tensor& w) const;

  FeatureMap map_;
  int64_t heads_, head_dim_, feature_dim_, taylor_order_;
  bool causal_;
  std::unique_ptr<Linear> taylor_proj_;  // taylor only: (r, dh), registered as "taylor_proj"
  Tensor hedgehog_q_, hedgehog_k_;        // hedgehog only: (H, dh, dh) each
  FavorProjection favor_;                 // favor only
};

}  // namespace tarn
