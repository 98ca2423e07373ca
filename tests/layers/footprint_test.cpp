// The footprint the up-front memory checks use (BartConfig::footprint, app/session.h) counts
// exactly what every attention kind registers: the delta rule's block with its conv_size taps,
// hybrid's gate, Taylor's projection, Hedgehog's maps, FAVOR+'s buffer, per-layer lists layer by
// layer (issue 56, item 3: conv_size 10^12 passed the check and ended in std::bad_alloc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "layers/bart.h"

namespace tarn {
namespace {

using FeatureMap = kernels::cpu::FeatureMap;
using Kind = AttentionKind;

AttentionConfig kind(Kind k) {
  AttentionConfig a;
  a.kind = k;
  return a;
}

AttentionConfig map(FeatureMap m) { return AttentionConfig::linear_attention(m); }

double buffer_values(const BartForConditionalGeneration& model) {
  double n = 0;
  for (const auto& [name, t] : model.named_buffers()) n += static_cast<double>(t->numel());
  return n;
}

TEST(BartFootprint, CountsEveryAttentionKindsParametersAndBuffersExactly) {
  AttentionConfig delta = kind(Kind::delta), gated = kind(Kind::gated), hybrid = kind(Kind::hybrid);
  delta.conv_size = 7;
  gated.conv_size = 1;
  hybrid.window = 8;
  AttentionConfig hybrid_delta = hybrid;
  hybrid_delta.global = Kind::delta;
  hybrid_delta.conv_size = 3;
  AttentionConfig taylor = map(FeatureMap::taylor), favor = map(FeatureMap::favor);
  taylor.taylor_dim = 5;
  taylor.taylor_order = 4;
  favor.favor_features = 24;
  AttentionConfig hybrid_favor = hybrid;
  hybrid_favor.feature_map = FeatureMap::favor;
  hybrid_favor.favor_features = 20;
  const std::vector<AttentionConfig> self_kinds = {AttentionConfig::softmax_attention(), map(FeatureMap::elu1),
                                                   delta, gated, hybrid, hybrid_delta, taylor,
                                                   map(FeatureMap::hedgehog), favor, hybrid_favor};
  AttentionConfig aligned_gated = taylor;  // align_gate's (H, D) weight and H bias
  aligned_gated.align_decay = 0.9;
  aligned_gated.align_gate = true;
  AttentionConfig routed;  // route_gate's (H, D) weight and H bias
  routed.kind = Kind::routed;
  const std::vector<AttentionConfig> cross_kinds = {AttentionConfig::softmax_attention(), delta, gated, hybrid,
                                                    taylor, map(FeatureMap::hedgehog), favor, hybrid_favor,
                                                    aligned_gated, routed};
  std::vector<BartConfig> configs;
  for (const AttentionConfig& self : self_kinds) {
    BartConfig c = BartConfig::tiny();
    c.vocab_size = 50, c.d_model = 24, c.heads = 3;
    c.ffn_dim = 32, c.max_position_embeddings = 16;
    c.attention.encoder_self = c.attention.decoder_self = self;
    configs.push_back(c);
  }
  for (const AttentionConfig& cross : cross_kinds) {
    BartConfig c = configs.front();
    c.attention.cross = cross;
    configs.push_back(c);
  }
  // Per-layer lists: each entry counted as itself.
  BartConfig mixed = configs.front();
  mixed.encoder_layers = 3;
  mixed.attention.encoder_self.per_layer = {delta, taylor, hybrid_favor};
  mixed.attention.decoder_self.per_layer = {hybrid_delta, map(FeatureMap::hedgehog)};
  mixed.attention.cross.per_layer = {favor, gated};
  configs.push_back(mixed);
  for (const BartConfig& c : configs) {
    c.validate();
    BartForConditionalGeneration model(c);
    const BartConfig::Footprint f = c.footprint();
    EXPECT_EQ(f.parameters(), static_cast<double>(model.parameter_count())) << c.str();
    EXPECT_EQ(f.buffer_values, buffer_values(model)) << c.str();
  }
}

// Taps scale the delta block's parameters; a schema-maximal value (2^63 - 1) stays a finite,
// huge double instead of wrapping (the estimate is in doubles throughout).
TEST(BartFootprint, ConvolutionTapsScaleTheParametersWithoutWrapping) {
  BartConfig c = BartConfig::tiny();
  AttentionConfig a = kind(Kind::delta);
  a.conv_size = 4;
  c.with_attention(a);
  const double at4 = c.footprint().parameters();
  c.attention.decoder_self.conv_size = 5;
  // One more tap: d_model values per convolution (q, k, v) per decoder layer.
  EXPECT_EQ(c.footprint().parameters() - at4, 3.0 * 64 * 2);
  c.attention.decoder_self.conv_size = std::numeric_limits<int64_t>::max();
  const double huge = c.footprint().parameters();
  EXPECT_TRUE(std::isfinite(huge));
  EXPECT_GT(huge, 1e21);
  EXPECT_GT(c.footprint().attention_parameters, 1e21);
}

}  // namespace
}  // namespace tarn
