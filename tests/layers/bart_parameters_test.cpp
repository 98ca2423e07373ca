// Parameter names, order and shapes of the tiny model against HF's BartForConditionalGeneration
// (modeling_bart.py registration order: embed_positions, layers, layernorm_embedding; in an
// attention k, v, q, out; the tied table listed once as model.shared.weight).
#include <gtest/gtest.h>

#include <map>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "layers/bart.h"

namespace tarn {
namespace {

using Expected = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Written out from HF conventions for d_model 64, ffn 256, vocab 1000, max positions 128,
// 2 encoder and 2 decoder layers.
Expected hf_tiny_parameters() {
  const int64_t d = 64, f = 256, v = 1000, p = 128 + 2;
  Expected e;
  auto linear = [&](const std::string& n, int64_t out, int64_t in) {
    e.push_back({n + ".weight", {out, in}});
    e.push_back({n + ".bias", {out}});
  };
  auto norm = [&](const std::string& n) {
    e.push_back({n + ".weight", {d}});
    e.push_back({n + ".bias", {d}});
  };
  auto attention = [&](const std::string& n) {
    linear(n + ".k_proj", d, d);
    linear(n + ".v_proj", d, d);
    linear(n + ".q_proj", d, d);
    linear(n + ".out_proj", d, d);
  };
  e.push_back({"model.shared.weight", {v, d}});
  e.push_back({"model.encoder.embed_positions.weight", {p, d}});
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.encoder.layers." + std::to_string(i);
    attention(l + ".self_attn");
    norm(l + ".self_attn_layer_norm");
    linear(l + ".fc1", f, d);
    linear(l + ".fc2", d, f);
    norm(l + ".final_layer_norm");
  }
  norm("model.encoder.layernorm_embedding");
  e.push_back({"model.decoder.embed_positions.weight", {p, d}});
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.decoder.layers." + std::to_string(i);
    attention(l + ".self_attn");
    norm(l + ".self_attn_layer_norm");
    attention(l + ".encoder_attn");
    norm(l + ".encoder_attn_layer_norm");
    linear(l + ".fc1", f, d);
    linear(l + ".fc2", d, f);
    norm(l + ".final_layer_norm");
  }
  norm("model.decoder.layernorm_embedding");
  return e;
}

TEST(BartParameters, TinyNamesOrderAndShapesMatchHuggingFace) {
  BartForConditionalGeneration model(BartConfig::tiny());
  const Expected expected = hf_tiny_parameters();
  const auto actual = model.named_parameters();
  ASSERT_EQ(actual.size(), expected.size());
  int64_t total = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first) << "parameter " << i;
    EXPECT_EQ(actual[i].second->shape(), Shape(expected[i].second)) << expected[i].first;
    EXPECT_TRUE(actual[i].second->requires_grad()) << expected[i].first;
    total += Shape(expected[i].second).numel();
  }
  EXPECT_EQ(model.parameter_count(), total);
}

TEST(BartParameters, FinalLogitsBiasIsAZeroBuffer) {
  BartForConditionalGeneration model(BartConfig::tiny());
  const auto buffers = model.named_buffers();
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].first, "final_logits_bias");
  EXPECT_EQ(buffers[0].second->shape(), Shape({1, 1000}));
  for (float x : buffers[0].second->to_vector()) ASSERT_EQ(x, 0.0f);
}

TEST(BartParameters, EmbeddingsAreTiedToTheSharedTable) {
  BartForConditionalGeneration model(BartConfig::tiny());
  model.eval();
  for (const auto& [alias, target] : BartForConditionalGeneration::tied_parameter_aliases())
    EXPECT_EQ(target, "model.shared.weight") << alias;
  // One changed row of the shared table changes the encoder input, the decoder input and the
  // output projection alike: all three read the same tensor.
  const std::vector<int32_t> src = {7, 5}, tgt = {2, 7};
  const Tensor h = Tensor::ones({1, 1, 64});
  const std::vector<float> enc = model.encode(src, {1, 2}, {}).to_vector();
  const std::vector<float> dec = model.model.decoder.forward(tgt, {1, 2}, model.encode({5, 5}, {1, 2}, {}), {})
                                     .to_vector();
  const float head = model.lm_head(h).to_vector()[7];
  model.model.shared.weight.f32()[7 * 64 + 3] += 1.0f;
  EXPECT_NE(model.encode(src, {1, 2}, {}).to_vector(), enc);
  EXPECT_NE(model.model.decoder.forward(tgt, {1, 2}, model.encode({5, 5}, {1, 2}, {}), {}).to_vector(), dec);
  EXPECT_NEAR(model.lm_head(h).to_vector()[7], head + 1.0f, 1e-5);
}

// align_gate_bias (issue 53) starts every gate's bias there and changes no other draw.
TEST(BartParameters, TheAlignGateBiasStartsTheGateAndChangesNoOtherWeight) {
  AttentionConfig gated = AttentionConfig::linear_attention(FeatureMap::taylor);
  gated.align_decay = 0.7;
  gated.align_gate = true;
  BartConfig c = BartConfig::tiny();
  c.attention.cross = gated;
  BartForConditionalGeneration plain(c, /*seed=*/3);
  c.attention.cross.align_gate_bias = -3.0;
  BartForConditionalGeneration biased(c, /*seed=*/3);
  std::map<std::string, std::vector<float>> before;
  for (const auto& [name, t] : plain.named_parameters()) before[name] = t->to_vector();
  int gates = 0;
  for (const auto& [name, t] : biased.named_parameters()) {
    const std::vector<float> v = t->to_vector();
    if (name.find("align_gate.bias") != std::string::npos) {
      ++gates;
      for (float x : v) ASSERT_EQ(x, -3.0f) << name;
      for (float x : before.at(name)) ASSERT_EQ(x, 0.0f) << name;
    } else {
      ASSERT_EQ(v, before.at(name)) << name;
    }
  }
  EXPECT_EQ(gates, c.decoder_layers);
}

TEST(BartParameters, InitialisationFollowsHuggingFace) {
  BartConfig c = BartConfig::tiny();
  BartForConditionalGeneration model(c, /*seed=*/3);
  for (const auto& [name, t] : model.named_parameters()) {
    const std::vector<float> v = t->to_vector();
    const bool bias = name.size() > 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    const bool norm = name.find("layer_norm") != std::string::npos || name.find("layernorm") != std::string::npos;
    if (bias) {
      for (float x : v) ASSERT_EQ(x, 0.0f) << name;
    } else if (norm) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
    } else {
      double s2 = 0;
      for (float x : v) s2 += double(x) * x;
      const double std = std::sqrt(s2 / v.size());
      EXPECT_NEAR(std, c.init_std, 0.25 * c.init_std) << name;
    }
  }
  // The <pad> row of the shared table starts at zero, as nn.Embedding(padding_idx) does.
  const float* shared = model.model.shared.weight.f32();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(shared[c.pad_token_id * 64 + i], 0.0f);
  // Same seed, same model.
  BartForConditionalGeneration again(c, 3);
  EXPECT_EQ(again.model.decoder.layers[1]->fc2.weight.to_vector(), model.model.decoder.layers[1]->fc2.weight.to_vector());
}

TEST(BartParameters, AttentionChosenPerLayerGivesEachLayerItsOwnParameters) {
  // Layer 1 of the encoder is hybrid (a gate per head), layer 0 linear; the decoder's layer 0
  // is delta and its cross-attention of layer 1 uses the Taylor map (a projection of its own).
  BartConfig c = BartConfig::tiny();
  AttentionConfig hybrid = AttentionConfig::linear_attention(), delta;
  hybrid.kind = AttentionKind::hybrid;
  delta.kind = AttentionKind::delta;
  c.attention.encoder_self.per_layer = {AttentionConfig::linear_attention(), hybrid};
  c.attention.decoder_self.per_layer = {delta, AttentionConfig::softmax_attention()};
  c.attention.cross.per_layer = {AttentionConfig::softmax_attention(), AttentionConfig::linear_attention(FeatureMap::taylor)};
  BartForConditionalGeneration model(c, /*seed=*/3);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : model.named_parameters()) shapes[name] = t->shape();
  EXPECT_EQ(shapes.count("model.encoder.layers.0.self_attn.hybrid_gate.weight"), 0u);
  EXPECT_EQ(shapes["model.encoder.layers.1.self_attn.hybrid_gate.weight"], Shape({4, 64}));
  EXPECT_EQ(shapes["model.encoder.layers.1.self_attn.hybrid_gate.bias"], Shape({4}));
  EXPECT_EQ(shapes.count("model.decoder.layers.0.self_attn.delta.A_log"), 1u);
  EXPECT_EQ(shapes.count("model.decoder.layers.1.self_attn.delta.A_log"), 0u);
  EXPECT_EQ(shapes.count("model.decoder.layers.0.encoder_attn.taylor_proj.weight"), 0u);
  EXPECT_EQ(shapes.count("model.decoder.layers.1.encoder_attn.taylor_proj.weight"), 1u);
  // A list whose length is not the stack's layer count is refused, naming the field.
  c.attention.decoder_self.per_layer.push_back(delta);
  try {
    c.validate();
    FAIL() << "3 entries for 2 decoder layers were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention.decoder_self.per_layer: 3 entries for 2 layers"), std::string::npos)
        << e.what();
  }
}

TEST(BartParameters, DeltaAttentionKeepsItsLayersInitialValues) {
  // Registered with Module::Init::kept_initial_value: the model's initialiser leaves the decay
  // rates, the convolutions (identity: row 0 ones, the rest zeros) and the norm as the layer set
  // them, and draws the projections as every Linear.
  BartConfig c = BartConfig::tiny();
  AttentionConfig delta;
  delta.kind = AttentionKind::delta;
  c.attention.encoder_self = c.attention.decoder_self = c.attention.cross = delta;
  BartForConditionalGeneration model(c, /*seed=*/3);
  int kept = 0, drawn = 0;
  for (const auto& [name, t] : model.named_parameters()) {
    if (name.find(".delta.") == std::string::npos) continue;
    const std::vector<float> v = t->to_vector();
    const bool projection = name.find("_proj.weight") != std::string::npos;
    EXPECT_EQ(model.keeps_initial_value(t), !projection && name.find("_proj.") == std::string::npos) << name;
    if (name.find("A_log") != std::string::npos) {
      EXPECT_FLOAT_EQ(v.front(), 0.0f) << name;                   // log 1
      EXPECT_FLOAT_EQ(v.back(), std::log(16.0f)) << name;         // log 16
    } else if (name.find("_conv") != std::string::npos) {
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], i < 64 ? 1.0f : 0.0f) << name << "[" << i << "]";
    } else if (name.find("output_norm") != std::string::npos) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
    } else if (projection) {
      double s2 = 0;
      for (float x : v) s2 += double(x) * x;
      EXPECT_NEAR(std::sqrt(s2 / v.size()), c.init_std, 0.25 * c.init_std) << name;
      ++drawn;
      continue;
    }
    kept += model.keeps_initial_value(t);
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(drawn, 0);
}

TEST(BartConfigTest, PresetsHaveTheStatedDimensions) {
  const BartConfig small = BartConfig::preset("small");
  EXPECT_EQ(small.d_model, 256);
  EXPECT_EQ(small.encoder_layers, 4);
  EXPECT_EQ(small.vocab_size, 8000);
  const BartConfig base = BartConfig::preset("base");
  EXPECT_EQ(base.d_model, 768);
  EXPECT_EQ(base.heads, 12);
  EXPECT_EQ(base.ffn_dim, 3072);
  EXPECT_EQ(base.vocab_size, 50265);
  EXPECT_EQ(base.max_position_embeddings, 1024);
  EXPECT_FALSE(base.scale_embedding);
  small.validate();
  base.validate();
  EXPECT_THROW(BartConfig::preset("huge"), Error);
}

TEST(BartConfigTest, ValidateNamesTheOffendingField) {
  BartConfig c = BartConfig::tiny();
  c.heads = 5;
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.heads: expected a divisor of model.d_model = 64, got 5"),
              std::string::npos)
        << e.what();
  }
  c = BartConfig::tiny();
  c.attention.cross = AttentionConfig::linear_attention();
  c.attention.cross.chunk = 0;
  EXPECT_THROW(c.validate(), Error);
  EXPECT_THROW(parse_feature_map("cosine"), Error);  // a map's name is parsed once, with the recipe
  c = BartConfig::tiny();
  c.dropout = 1.0f;
  EXPECT_THROW(c.validate(), Error);
  EXPECT_STREQ(attention_kind_name(AttentionConfig::Kind::linear), "linear");
}

// The footprint that up-front memory checks use (BartConfig::footprint) counts exactly the
// parameters the model registers, for every preset and for odd sizes, and the FAVOR+ buffers.
TEST(BartFootprint, CountsExactlyTheParametersTheModelRegisters) {
  std::vector<BartConfig> configs = {BartConfig::tiny(), BartConfig::small()};
  BartConfig odd = BartConfig::tiny();
  odd.vocab_size = 77, odd.d_model = 24, odd.encoder_layers = 3, odd.decoder_layers = 1;
  odd.ffn_dim = 40, odd.ffn_dim = 40, odd.max_position_embeddings = 33;
  odd.heads = 3;
  configs.push_back(odd);
  for (const BartConfig& c : configs) {
    BartForConditionalGeneration model(c);
    EXPECT_EQ(c.footprint().parameters(), static_cast<double>(model.parameter_count())) << c.str();
  }
  BartConfig favor = BartConfig::tiny();
  AttentionConfig a = AttentionConfig::linear_attention(FeatureMap::favor);
  a.favor_features = 32;
  favor.with_attention(a);
  const double head_dim = 64.0 / 4;
  // The output bias (vocab) and a features x head_dim projection per attention module.
  EXPECT_EQ(favor.footprint().buffer_values, 1000 + 32 * head_dim * (2 + 2 + 2));
}

}  // namespace
}  // namespace tarn

