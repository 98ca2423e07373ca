#pragma once
// Small helpers shared by the layers tests: configs, random batches, comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/rng.h"
#include "layers/bart.h"

namespace tarn::testing {

// The tiny preset with a small vocabulary and no dropout, every stack using `attention`.
inline BartConfig tiny_config(const AttentionConfig& attention, int64_t vocab = 48) {
  BartConfig c = BartConfig::tiny();
  c.vocab_size = vocab;
  c.max_position_embeddings = 32;
  c.dropout = 0.0f;
  c.with_attention(attention);
  return c;
}

// Attention set-ups every model-level property is checked with: all softmax, all linear, and
// a mix (the recipe picks each stack's attention separately).
struct AttentionSetup {
  std::string name;
  AttentionConfig encoder_self, decoder_self, cross;
  std::vector<AttentionConfig> encoder_self_layers = {}, decoder_self_layers = {}, cross_layers = {};  // per layer
};
inline std::vector<AttentionSetup> attention_setups() {
  const AttentionConfig sm = AttentionConfig::softmax_attention();
  const AttentionConfig elu = AttentionConfig::linear_attention(FeatureMap::elu1);
  const AttentionConfig relu = AttentionConfig::linear_attention(FeatureMap::relu);
  return {{"softmax", sm, sm, sm},
          {"linear_elu1", elu, elu, elu},
          {"mixed", elu, sm, relu},
          {"mixed2", sm, elu, elu}};
}
// The remaining feature maps, in every stack.
inline std::vector<AttentionSetup> other_feature_map_setups() {
  AttentionConfig favor = AttentionConfig::linear_attention(FeatureMap::favor);
  favor.favor_features = 24;  // m != head_dim (16)
  const AttentionConfig exp = AttentionConfig::linear_attention(FeatureMap::exp);
  const AttentionConfig taylor = AttentionConfig::linear_attention(FeatureMap::taylor);
  const AttentionConfig hedgehog = AttentionConfig::linear_attention(FeatureMap::hedgehog);
  AttentionConfig taylor4 = taylor;  // order 4 on a 5-wide projection: 126 features
  taylor4.taylor_order = 4;
  taylor4.taylor_dim = 5;
  return {{"linear_exp", exp, exp, exp},
          {"linear_favor", favor, favor, favor},
          {"linear_taylor", taylor, taylor, taylor},
          {"linear_taylor4", taylor4, taylor4, taylor4},
          {"linear_hedgehog", hedgehog, hedgehog, hedgehog}};
}
// The gated delta rule in every stack (with its convolutions), in cross-attention alone
// without them beside linear self-attention, and gated (no erase) in every stack.
inline std::vector<AttentionSetup> delta_setups() {
  AttentionConfig delta;
  delta.kind = AttentionKind::delta;
  delta.chunk = 3;  // several checkpoints in a short sequence
  AttentionConfig plain = delta;
  plain.conv_size = 1;
  AttentionConfig gated = delta;
  gated.kind = AttentionKind::gated;
  const AttentionConfig elu = AttentionConfig::linear_attention(FeatureMap::elu1);
  // Linear cross-attention aligned by position (Taylor map, head decays 1, 0.7, 0.49, 0.24) under
  // delta self-attention, by chunks of 3 positions (several in each test sequence).
  AttentionConfig aligned = AttentionConfig::linear_attention(FeatureMap::taylor);
  aligned.align_decay = 0.7;
  aligned.chunk = 3;
  // The same with align_gate (issue 53): each head's decayed and plain reads mixed by a gate.
  AttentionConfig aligned_gated = aligned;
  aligned_gated.align_gate = true;
  // Routed cross-attention (issue 53) by chunks of 2 source positions, the best 2 read exactly:
  // several chunks in each test source, some left out.
  AttentionConfig routed;
  routed.kind = AttentionKind::routed;
  routed.route_chunk = 2;
  routed.route_top = 2;
  // A tree down from one landmark (route_root 1): a source of 7 positions is 4 chunks, then 2,
  // then 1, three levels, each but the top choosing among its parents' children; the best 2
  // (route_beam) above the keys' chunks and the best 1 of those, so that the beam matters.
  AttentionConfig routed_tree = routed;
  routed_tree.route_root = 1;
  routed_tree.route_top = 1;
  routed_tree.route_beam = 2;
  return {{"delta", delta, delta, delta},
          {"routed_cross", delta, delta, routed},
          {"delta_cross", elu, elu, plain},
          {"gated", gated, gated, gated},
          {"aligned_cross", delta, delta, aligned},
          {"aligned_gated_cross", delta, delta, aligned_gated},
          {"routed_tree_cross", delta, delta, routed_tree}};
}
// Hybrid self-attention (window softmax + a global part, gated) in both stacks: windows shorter
// than the test sequences. "hybrid": global linear, the encoder's with elu1, the decoder's with
// the Taylor map. "hybrid_delta": global gated in the encoder, delta in the decoder (chunks of 3
// tokens: several checkpoints). Linear cross-attention in both. "hybrid_cross": hybrid
// cross-attention (the source positions within 2 of the target's, and the Taylor map) under
// linear self-attention; targets longer than the source + 2 have positions that see no key.
inline std::vector<AttentionSetup> hybrid_setups() {
  AttentionConfig enc = AttentionConfig::linear_attention(FeatureMap::elu1);
  enc.kind = AttentionKind::hybrid;
  enc.window = 4;
  AttentionConfig dec = AttentionConfig::linear_attention(FeatureMap::taylor);
  dec.kind = AttentionKind::hybrid;
  dec.window = 3;
  AttentionConfig enc_gated = enc, dec_delta = dec;
  enc_gated.global = AttentionKind::gated;
  dec_delta.global = AttentionKind::delta;
  dec_delta.chunk = 3;
  const AttentionConfig elu = AttentionConfig::linear_attention(FeatureMap::elu1);
  AttentionConfig cross = AttentionConfig::linear_attention(FeatureMap::taylor);
  cross.kind = AttentionKind::hybrid;
  cross.window = 4;
  return {{"hybrid", enc, dec, elu}, {"hybrid_delta", enc_gated, dec_delta, elu}, {"hybrid_cross", elu, elu, cross}};
}
// Attention chosen per layer (the tiny preset's 2 + 2 layers), a different kind in each layer.
inline std::vector<AttentionSetup> per_layer_setups() {
  const AttentionConfig sm = AttentionConfig::softmax_attention();
  const AttentionConfig elu = AttentionConfig::linear_attention(FeatureMap::elu1);
  const AttentionConfig taylor = AttentionConfig::linear_attention(FeatureMap::taylor);
  AttentionConfig hybrid = elu, delta;
  hybrid.kind = AttentionKind::hybrid;
  hybrid.window = 3;
  delta.kind = AttentionKind::delta;
  delta.chunk = 3;
  AttentionSetup s{"per_layer", elu, elu, elu};
  s.encoder_self_layers = {elu, hybrid};
  s.decoder_self_layers = {delta, sm};
  s.cross_layers = {sm, taylor};
  return {s};
}
inline std::vector<AttentionSetup> all_attention_setups() {
  std::vector<AttentionSetup> all = attention_setups();
  for (const AttentionSetup& s : other_feature_map_setups()) all.push_back(s);
  for (const AttentionSetup& s : delta_setups()) all.push_back(s);
  for (const AttentionSetup& s : hybrid_setups()) all.push_back(s);
  for (const AttentionSetup& s : per_layer_setups()) all.push_back(s);
  return all;
}
inline BartConfig config_for(const AttentionSetup& s, int64_t vocab = 48) {
  BartConfig c = tiny_config(s.encoder_self, vocab);
  c.attention.decoder_self = s.decoder_self;
  c.attention.cross = s.cross;
  c.attention.encoder_self.per_layer = s.encoder_self_layers;
  c.attention.decoder_self.per_layer = s.decoder_self_layers;
  c.attention.cross.per_layer = s.cross_layers;
  return c;
}

// Uniform ids in [4, vocab): never a special token, so no accidental padding.
inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = 4 + static_cast<int32_t>(rng.below(static_cast<uint32_t>(vocab - 4)));
  return ids;
}

// Row b, positions [0, n) of a (B, N, V) tensor flattened: the values of those positions.
inline std::vector<float> rows_prefix(const std::vector<float>& x, int64_t batch, int64_t len, int64_t keep,
                                      int64_t width) {
  std::vector<float> out;
  for (int64_t b = 0; b < batch; ++b)
    out.insert(out.end(), x.begin() + (b * len) * width, x.begin() + (b * len + keep) * width);
  return out;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

}  // namespace tarn::testing
