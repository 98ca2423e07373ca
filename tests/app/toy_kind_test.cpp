// Adding an attention kind touches no library file (docs/design.md, "Adding an attention kind"):
// this test defines a kind, previous-token attention, registers it through the public interface,
// and trains a tiny model with it from a recipe; the model decodes (each step equal to teacher
// forcing) and exports.
//
// Previous-token attention: position i reads only its own value and the one before it,
// ctx_i = g v_i + (1 - g) v_{i-1} with g = σ((q_i·k_i - q_i·k_{i-1}) / sqrt(dh) + b_h), the
// softmax over those two keys with a learned per-head bias b ("prev_bias", zero at the start).
// Before position 0 stands a zero token. Its decoding state is the last key and value.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "app/export.h"
#include "app/generate.h"
#include "app/recipe/recipe.h"
#include "app/trained_model.h"
#include "app/trainer.h"
#include "framework/autograd.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"
#include "layers/attention/registry.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {

struct PreviousTokenState : DecodeStateOf<PreviousTokenState> {
  Tensor key, value;  // the last position's, (B, H, 1, dh)
  std::vector<Tensor*> tensors() override { return {&key, &value}; }
};

class PreviousTokenAttention : public AttentionKindLayer {
 public:
  explicit PreviousTokenAttention(AttentionSite& site) : site_(site), bias_(Tensor::zeros({site.shape().heads})) {
    site.add_parameter("prev_bias", bias_, /*keep_initial_value=*/true);
  }

  Tensor forward(const AttentionInputs& in) const override {
    const AttentionShape& s = site_.shape();
    const Tensor q = split_heads(in.q, s), k = split_heads(in.k, s), v = split_heads(in.v, s);
    return merge_heads(read(q, k, v, shifted(k), shifted(v)));
  }

  std::unique_ptr<DecodeState> start_self(int64_t batch) const override {
    const AttentionShape& s = site_.shape();
    auto state = std::make_unique<PreviousTokenState>();
    state->key = Tensor::zeros({batch, s.heads, 1, s.head_dim}, site_.device());
    state->value = Tensor::zeros({batch, s.heads, 1, s.head_dim}, site_.device());
    return state;
  }

  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override {
    auto& st = static_cast<PreviousTokenState&>(state);
    const AttentionShape& s = site_.shape();
    const Tensor q = split_heads(in.q, s), k = split_heads(in.k, s), v = split_heads(in.v, s);
    const Tensor out = read(q, k, v, st.key, st.value);
    st.key = k;
    st.value = v;
    return merge_heads(out);
  }

  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs&) const override {
    throw Error("previous_token attention is self-attention only");
  }
  Tensor step_cross(const AttentionInputs&, const DecodeState&, int64_t) const override {
    throw Error("previous_token attention is self-attention only");
  }

 private:
  // x (B, H, N, dh) one position later: a zero row first, the last row dropped.
  static Tensor shifted(const Tensor& x) {
    Shape first = x.shape();
    first[2] = 1;
    return concat({Tensor::zeros(first, x.device()), slice(x, 2, 0, x.size(2) - 1)}, 2);
  }

  Tensor read(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_prev, const Tensor& v_prev) const {
    const float scale_by = 1.0f / std::sqrt(static_cast<float>(site_.shape().head_dim));
    const Tensor scores = scale(sub(sum(mul(q, k), -1, true), sum(mul(q, k_prev), -1, true)), scale_by);
    const Tensor bias = reshape(bias_, {1, site_.shape().heads, 1, 1});
    const Tensor g = sigmoid(add(scores, bias.to(scores.device())));
    return add(v_prev, mul(g, sub(v, v_prev)));
  }

  const AttentionSite& site_;
  Tensor bias_;
};

void register_previous_token() {
  AttentionKindEntry e;
  e.name = "previous_token";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> {
    return std::make_unique<PreviousTokenAttention>(s);
  };
  e.parameters = [](const AttentionConfig&, const AttentionSizes& s) { return s.heads; };
  e.decode_state_bytes = [](const AttentionConfig&, const AttentionSizes& s, double) { return 2 * 4.0 * s.d_model; };
  // Its recipe part: it reads no setting beyond its kind (the default: each key given is
  // reported ignored), and one rule: a sequence's previous token is self-attention's.
  e.settings.check = [](const AttentionConfig&, AttentionUse use, const SettingReport& report) {
    if (use.cross) report.error("kind", "previous_token reads the sequence's own previous token: self-attention only");
  };
  register_attention_kind(e);
}

TEST(ToyKind, ARegisteredKindTrainsFromARecipeDecodesAndExports) {
  register_previous_token();
  const std::string dir = testing::make_tiny_corpus("toy_kind");
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, 40);
  for (const char* s : {"model.attention.encoder_self.kind=previous_token", "model.attention.decoder_self.kind=previous_token",
                        "validation.every_steps=0", "checkpoints.every_steps=0"})
    o.overrides.push_back(s);
  const TrainSummary summary = train(o);
  ASSERT_EQ(summary.steps, 40);
  EXPECT_FALSE(summary.failed);
  const std::vector<double> losses = testing::train_losses(dir + "/run/metrics.jsonl");
  ASSERT_GE(losses.size(), 2u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "the loss did not fall";

  // The checkpoint holds the kind's parameter, and the model built from it is the toy kind's.
  const TrainedModel m = load_trained_model(dir + "/run");
  EXPECT_EQ(m.recipe.model.attention.decoder_self.kind.name(), std::string("previous_token"));
  const auto named = m.model->named_parameters();
  EXPECT_TRUE(std::any_of(named.begin(), named.end(), [](const auto& p) {
    return p.first == "model.decoder.layers.0.self_attn.prev_bias";
  }));
  EXPECT_EQ(m.model->config().footprint().parameters(), static_cast<double>(m.model->parameter_count()))
      << "the registered parameter count disagrees with the model";

  // Decoding step by step gives teacher forcing's logits.
  NoGradGuard no_grad;
  const std::vector<int32_t> src = m.tok->encode("the small cat sees a red bird .");
  std::vector<int32_t> source = src;
  source.push_back(m.tok->eos_id());
  const std::vector<int32_t> target = {m.tok->eos_id(), src[0], src[1], src[2], src[3]};  // decoder input
  const int64_t s_len = static_cast<int64_t>(source.size()), t_len = static_cast<int64_t>(target.size());
  const Tensor forced = m.model->forward(source, {1, s_len}, {}, target, {1, t_len});  // (1, T, V)
  const int64_t vocab = forced.size(2);
  const std::vector<float> all = forced.to_vector();
  DecodingState st = m.model->start_decoding(m.model->encode(source, {1, s_len}, {}), {});
  for (int64_t t = 0; t < t_len; ++t) {
    const std::vector<float> step = m.model->decode_step(st, {target[static_cast<size_t>(t)]}).to_vector();
    double worst = 0, largest = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      worst = std::max(worst, std::abs(static_cast<double>(step[j]) - all[t * vocab + j]));
      largest = std::max(largest, std::abs(static_cast<double>(all[t * vocab + j])));
    }
    EXPECT_LT(worst, 2e-5 * largest) << "position " << t;
  }
  GenerateOptions g;
  g.max_length = 8;
  EXPECT_EQ(generate(*m.model, {source}, g).size(), 1u);

  // The export names the kind and carries its parameter.
  const ExportResult e = export_checkpoint(dir + "/run", dir + "/export");
  std::ifstream in(e.dir + "/config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json::Json config = json::parse(text, "config.json");
  EXPECT_EQ(json::as_string(config.at("tarn").at("decoder_self_attention").at("kind"), "kind"), "previous_token");
  const auto tensors = load_safetensors(e.dir + "/model.safetensors").tensors;
  EXPECT_TRUE(std::any_of(tensors.begin(), tensors.end(),
                          [](const auto& t) { return t.first == "model.decoder.layers.0.self_attn.prev_bias"; }));
}

TEST(ToyKind, ItsRecipeRulesAndIgnoredKeysAreReportedAtTheirLines) {
  register_previous_token();
  const std::string data = "data:\n  train: corpus/train.txt\n";
  const Recipe warned = parse_recipe(data + "model:\n  attention:\n    encoder_self: {kind: previous_token, chunk: 8}\n",
                                     "w.yaml");
  ASSERT_EQ(warned.warnings.size(), 1u);
  EXPECT_EQ(warned.warnings[0], "w.yaml:5: model.attention.encoder_self.chunk: ignored: kind is previous_token");
  for (const std::string cross : {"cross: {kind: previous_token}", "cross: {layers: [linear, previous_token]}"}) {
    try {
      parse_recipe(data + "model:\n  preset: tiny\n  attention:\n    " + cross + "\n", "bad.yaml");
      ADD_FAILURE() << cross << " was accepted";
    } catch (const ConfigError& err) {
      EXPECT_NE(std::string(err.what()).find("bad.yaml:6: model.attention.cross."), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("kind: previous_token reads the sequence's own previous token"),
                std::string::npos)
          << err.what();
    }
  }
  // The model's own check applies the same rule.
  BartConfig c = BartConfig::tiny();
  c.attention.cross.kind = AttentionKind::named("previous_token");
  EXPECT_THROW(c.validate(), Error);
  c.attention.cross = c.attention.encoder_self;
  c.attention.encoder_self.kind = AttentionKind::named("previous_token");
  EXPECT_NO_THROW(c.validate());
}

TEST(ToyKind, AnUnregisteredKindIsRefusedNamingTheKnownOnes) {
  const std::string dir = testing::make_tiny_corpus("toy_kind_unknown");
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, 1);
  o.overrides.push_back("model.attention.decoder_self.kind=next_token");
  try {
    train(o);
    FAIL() << "an unknown kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.attention.decoder_self.kind"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tarn::app
