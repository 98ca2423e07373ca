#include "layers/attention/feature_map.h"

#include <cmath>

#include "framework/ops/attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"

namespace tarn {
namespace {

// FAVOR+ projections draw from streams of the model seed far from the weights' stream 0.
constexpr uint64_t kFavorStreamBase = uint64_t{1} << 40;

// FAVOR+ without a stabiliser: exp(W x' - |x'|^2 / 2) / sqrt(m), x' = d^(-1/4) x (docs/design.md
// section 2). Each row depends on that row only, so a causal forward and a decoding step give
// the same features. W x' has entries ~ N(0, |x'|^2), so the exponent stays below ~|x'|^2/2
// unless |x'| is large: no overflow in practice.
Tensor favor_unstabilised(const Tensor& x, const Tensor& w) {
  const int64_t d = x.shape().back(), m = w.size(0);
  const Tensor xs = scale(x, 1.0f / std::pow(static_cast<float>(d), 0.25f));
  const Tensor t = matmul(xs, w, false, true);                     // (..., N, m)
  const Tensor half_sq = scale(sum(mul(xs, xs), -1, true), 0.5f);  // (..., N, 1)
  return scale(exp(sub(t, half_sq)), 1.0f / std::sqrt(static_cast<float>(m)));
}

}  // namespace

FeatureMapLayer::FeatureMapLayer(AttentionSite& site)
    : map_(site.config().feature_map),
      heads_(site.shape().heads),
      head_dim_(site.shape().head_dim),
      feature_dim_(site.config().feature_count(site.shape().head_dim)),
      taylor_order_(site.config().taylor_order),
      causal_(site.shape().causal) {
  const AttentionConfig& config = site.config();
  if (map_ == FeatureMap::taylor) {
    taylor_proj_ = std::make_unique<Linear>(head_dim_, config.taylor_dim, site.init(), /*with_bias=*/false);
    site.add_module("taylor_proj", *taylor_proj_);
  }
  if (map_ == FeatureMap::hedgehog) {
    // The identity per head: at the start φ(x) = [softmax(x), softmax(-x)].
    for (Tensor* w : {&hedgehog_q_, &hedgehog_k_}) {
      *w = Tensor::zeros({heads_, head_dim_, head_dim_});
      for (int64_t h = 0; h < heads_; ++h)
        for (int64_t i = 0; i < head_dim_; ++i) w->f32()[(h * head_dim_ + i) * head_dim_ + i] = 1.0f;
    }
    site.add_parameter("hedgehog_q", hedgehog_q_, /*keep_initial_value=*/true);
    site.add_parameter("hedgehog_k", hedgehog_k_, /*keep_initial_value=*/true);
  }
  if (map_ == FeatureMap::favor) {
    favor_.m = feature_dim_;
    favor_.d = head_dim_;
    favor_.redraw_every = config.favor_redraw_every;
    favor_.rng = RngState{site.init().seed(), kFavorStreamBase + site.init().next_stream(), 0};
    favor_.draw();
    site.add_buffer("favor_projection", favor_.w);
  }
}

double FeatureMapLayer::parameters(const AttentionConfig& a, const AttentionSizes& s) {
  if (a.feature_map == FeatureMap::taylor) return s.head_dim() * static_cast<double>(a.taylor_dim);
  if (a.feature_map == FeatureMap::hedgehog) return 2 * std::max(1.0, s.heads) * s.head_dim() * s.head_dim();
  return 0.0;
}

double FeatureMapLayer::buffer_values(const AttentionConfig& a, const AttentionSizes& s) {
  if (a.feature_map != FeatureMap::favor) return 0.0;
  return static_cast<double>(a.feature_count(static_cast<int64_t>(s.head_dim()))) * s.head_dim();
}

bool FeatureMapLayer::materialises() const {
  return map_ == FeatureMap::favor || kernels::cpu::feature_map_is_learned(map_);
}

Tensor FeatureMapLayer::taylor_features(const Tensor& x) const {
  return taylor_feature_map(taylor_proj_->forward(x), static_cast<int>(taylor_order_));
}

Tensor FeatureMapLayer::hedgehog_features(const Tensor& x, const Tensor& w) const {
  // (B, H, N, dh) -> (H, B N, dh): the heads become matmul's batch, which w's (H, dh, dh) matches.
  const int64_t b = x.size(0), n = x.size(2);
  const Tensor rows = reshape(permute(x, {1, 0, 2, 3}), {heads_, b * n, head_dim_});
  const Tensor p = permute(reshape(matmul(rows, w, false, true), {heads_, b, n, head_dim_}), {1, 0, 2, 3});
  return concat({softmax(p), softmax(neg(p))}, -1);
}

Tensor FeatureMapLayer::query_features(const Tensor& q) const {
  if (map_ == FeatureMap::taylor) return taylor_features(q);
  if (map_ == FeatureMap::hedgehog) return hedgehog_features(q, hedgehog_q_);
  if (map_ == FeatureMap::favor) return feature_map(q, map_, FeatureRole::query, favor_.w.to(q.device()));
  return feature_map(q, map_, FeatureRole::query);
}

Tensor FeatureMapLayer::key_features(const Tensor& k) const {
  if (map_ == FeatureMap::taylor) return taylor_features(k);
  if (map_ == FeatureMap::hedgehog) return hedgehog_features(k, hedgehog_k_);
  if (map_ == FeatureMap::favor)
    return causal_ ? favor_unstabilised(k, favor_.w.to(k.device()))
                   : feature_map(k, map_, FeatureRole::key, favor_.w.to(k.device()));
  return feature_map(k, map_, FeatureRole::key);
}

}  // namespace tarn
