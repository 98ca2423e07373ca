#include "layers/attention/linear.h"

#include <algorithm>
#include <cmath>

#include "framework/ops/attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "layers/attention/aligned.h"
#include "layers/attention/common.h"
#include "layers/attention/registry.h"

namespace tarn {

double LinearAttention::decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double) {
  const double head = std::floor(s.head_dim());
  return 4.0 * std::max(1.0, s.heads) * static_cast<double>(a.feature_count(static_cast<int64_t>(head))) * (head + 1);
}

AttentionTrainingBytes LinearAttention::training_bytes(const AttentionConfig& a, const AttentionSizes& s,
                                                      const AttentionBatch& b) {
  const double h = std::max(1.0, s.heads), head_dim = s.head_dim();
  const double features = static_cast<double>(a.feature_count(static_cast<int64_t>(head_dim)));
  return {4 * b.tokens * 2 * h * std::max(0.0, features - head_dim), 4 * h * features * (head_dim + 1)};
}

void LinearAttention::export_settings(const AttentionConfig& a, json::Json& o) {
  o["feature_map"] = kernels::cpu::feature_map_name(a.feature_map);
  o["chunk"] = a.chunk;
  o["favor_features"] = a.favor_features;
  if (a.feature_map == FeatureMap::taylor) {
    o["taylor_order"] = a.taylor_order;
    o["taylor_dim"] = a.taylor_dim;
  }
  o["eps"] = a.eps;
  if (a.align_decay > 0) o["align_decay"] = a.align_decay;
  if (a.align_decay > 0 && a.align_gate) o["align_gate"] = true;
}

LinearAttention::LinearAttention(AttentionSite& site) : site_(site), features_(site) {}

Tensor LinearAttention::forward(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  return merge_heads(context(split_heads(in.q, s), split_heads(in.k, s), split_heads(in.v, s), in.padding()));
}

Tensor LinearAttention::context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  const AttentionConfig& config = site_.config();
  LinearAttentionOptions opt;
  opt.causal = site_.shape().causal;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.eps = static_cast<float>(config.eps);
  opt.chunk = static_cast<int>(config.chunk);
  opt.fused_feature_map = features_.fused_map();
  opt.precision = site_.precision();  // bf16 kernels where the device has them (framework/ops/attention.h)
  if (features_.materialises()) return linear_attention(features_.query_features(q), features_.key_features(k), v, opt);
  return linear_attention(q, k, v, opt);  // φ applied inside the kernel
}

std::unique_ptr<DecodeState> LinearAttention::start_self(int64_t batch) const {
  const AttentionShape& s = site_.shape();
  auto state = std::make_unique<LinearState>();
  state->s = LinearAttentionState::zeros(batch, s.heads, features_.feature_dim(), s.head_dim).s.to(site_.device());
  return state;
}

Tensor LinearAttention::step_self(const AttentionInputs& in, DecodeState& state) const {
  const AttentionShape& s = site_.shape();
  const Tensor q = split_heads(in.q, s), k = split_heads(in.k, s), v = split_heads(in.v, s);  // (B, H, 1, dh)
  // S' += φ(k)ᵀ [v | 1]; out = φ(q) S' normalised (docs/design.md section 2, recurrent mode).
  LinearAttentionState st{static_cast<LinearState&>(state).s, state.length};
  LinearAttentionStepOptions opt;
  opt.eps = static_cast<float>(site_.config().eps);
  opt.fused_feature_map = features_.fused_map();
  const bool features = features_.materialises();
  return merge_heads(linear_attention_step(st, features ? features_.query_features(q) : q,
                                           features ? features_.key_features(k) : k, v, opt)
                         .view({q.size(0), s.heads, 1, s.head_dim}));
}

Tensor LinearAttention::masked_key_features(const Tensor& k, const PaddingMask& pad) const {
  const Tensor b = features_.key_features(k);
  return pad.empty() ? b : mul(b, key_keep(k.size(0), k.size(2), pad, b.device()));
}

Tensor LinearAttention::summary(const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  return matmul(masked_key_features(k, pad), append_ones(v), true, false);
}

Tensor LinearAttention::read(const Tensor& q, const Tensor& summary) const {
  return normalise(matmul(features_.query_features(q), summary), static_cast<float>(site_.config().eps));
}

std::unique_ptr<DecodeState> LinearAttention::precompute_cross(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  auto state = std::make_unique<LinearState>();
  state->s = summary(split_heads(in.k, s), split_heads(in.v, s), in.padding());
  return state;
}

Tensor LinearAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t) const {
  return merge_heads(read(split_heads(in.q, site_.shape()), static_cast<const LinearState&>(state).s));
}

// The registry's entry of linear attention (builtin_kinds.inc): with align_decay, aligned
// cross-attention (aligned.h).
AttentionKindEntry linear_entry() {
  AttentionKindEntry e;
  e.name = "linear";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> {
    if (s.config().align_decay > 0) return std::make_unique<AlignedCrossAttention>(s);
    return std::make_unique<LinearAttention>(s);
  };
  e.parameters = [](const AttentionConfig& a, const AttentionSizes& s) {
    return a.align_decay > 0 ? AlignedCrossAttention::parameters(a, s) : LinearAttention::parameters(a, s);
  };
  e.buffer_values = FeatureMapLayer::buffer_values;
  e.decode_state_bytes = LinearAttention::decode_state_bytes;
  e.export_settings = LinearAttention::export_settings;
  e.training_bytes = [](const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b) {
    return a.align_decay > 0 ? AlignedCrossAttention::training_bytes(a, s, b) : LinearAttention::training_bytes(a, s, b);
  };
  e.settings = linear_settings();
  return e;
}

}  // namespace tarn
