// export, eval and generate as a user runs them after training.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "data/denoising_dataset.h"
#include "framework/autograd.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "tests/app/app_test_util.h"
#include "app/checkpoint_state.h"
#include "app/evaluate.h"
#include "app/export.h"
#include "app/generate.h"
#include "app/session.h"
#include "app/trained_model.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {

std::string trained_run(const std::string& name, const std::string& attention_kind, int64_t steps) {
  const std::string dir = testing::make_tiny_corpus(name);
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, steps);
  // hybrid: in every stack (cross-attention's window around the target position); hybrid_delta
  // (hybrid over the delta rule, self-attention only under hybrid) keeps cross-attention linear.
  // taylor4: linear attention, cross-attention's with the 4th-order Taylor map.
  const bool hybrid = attention_kind.rfind("hybrid", 0) == 0, taylor4 = attention_kind == "taylor4";
  for (const char* stack : {"encoder_self", "decoder_self", "cross"})
    if (!(attention_kind == "hybrid_delta" && std::string(stack) == "cross"))
      o.overrides.push_back(std::string("model.attention.") + stack + ".kind=" +
                            (hybrid ? "hybrid" : taylor4 ? "linear" : attention_kind));
  if (taylor4)
    for (const char* setting : {"feature_map=taylor", "taylor_order=4", "taylor_dim=5"})
      o.overrides.push_back(std::string("model.attention.cross.") + setting);
  if (hybrid) o.overrides.push_back("model.attention.decoder_self.window=3");  // shorter than the glosses
  if (attention_kind == "hybrid") o.overrides.push_back("model.attention.cross.window=4");
  if (attention_kind == "hybrid_delta") {
    o.overrides.push_back("model.attention.encoder_self.global=delta");
    o.overrides.push_back("model.attention.decoder_self.global=delta");
  }
  o.overrides.push_back("validation.every_steps=0");
  train(o);
  return dir;
}

// Returns the run's folder (the export is in its export/).
std::string expect_reloaded_export_gives_identical_perplexity(const char* attention_kind) {
  const std::string dir = trained_run(std::string("export_") + attention_kind, attention_kind, 8);
  const std::string out = dir + "/export";
  const ExportResult r = export_checkpoint(dir + "/run", out);
  EXPECT_GT(r.tensors, 0);
  check_safetensors(out + "/model.safetensors");  // throws on any violation of the format

  const Checkpoint ckpt = open_checkpoint_or_run(dir + "/run");
  const Recipe recipe = checkpoint_recipe(ckpt);
  const Tokenizer tok = Tokenizer::load(out + "/spm.model");
  auto valid = open_dataset(recipe, tok, dir + "/valid.txt", 7, "valid");

  BartForConditionalGeneration from_ckpt(model_config(recipe, tok.vocab_size()));
  load_model_weights(ckpt, from_ckpt);
  BartForConditionalGeneration from_export(model_config(recipe, tok.vocab_size()), /*seed=*/99);
  load_state_dict(from_export, load_safetensors(out + "/model.safetensors").tensors, true);

  const EvalResult a = evaluate(from_ckpt, *valid, 1024), b = evaluate(from_export, *valid, 1024);
  EXPECT_GT(a.tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.nll_sum, b.nll_sum);  // bit-identical weights, same order of operations
  return dir;
}

TEST(Export, ReloadedExportGivesIdenticalPerplexity) { expect_reloaded_export_gives_identical_perplexity("linear"); }

TEST(Export, ReloadedDeltaExportGivesIdenticalPerplexity) {
  const std::string dir = expect_reloaded_export_gives_identical_perplexity("delta");
  const SafetensorsFile f = load_safetensors(dir + "/export/model.safetensors");
  for (const char* name : {"model.encoder.layers.0.self_attn.delta.A_log", "model.decoder.layers.1.self_attn.delta.q_conv",
                           "model.decoder.layers.1.encoder_attn.delta.beta_proj.weight",
                           "model.decoder.layers.0.encoder_attn.delta.output_norm.weight"})
    EXPECT_TRUE(f.find(name)) << name;
  EXPECT_FALSE(f.find("model.decoder.layers.0.encoder_attn.delta.q_conv"));  // cross-attention has none
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  const json::Json& cross = c.at("tarn").at("cross_attention");
  EXPECT_EQ(json::as_string(cross.at("kind"), "kind"), "delta");
  EXPECT_EQ(json::as_u64(cross.at("conv_size"), "conv_size"), 4u);
}

TEST(Export, ReloadedTaylorOrder4ExportGivesIdenticalPerplexity) {
  const std::string dir = expect_reloaded_export_gives_identical_perplexity("taylor4");
  const SafetensorsFile f = load_safetensors(dir + "/export/model.safetensors");
  const Tensor* proj = f.find("model.decoder.layers.0.encoder_attn.taylor_proj.weight");
  ASSERT_TRUE(proj);
  EXPECT_EQ(proj->size(0), 5);  // (taylor_dim, head_dim)
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  const json::Json& cross = c.at("tarn").at("cross_attention");
  EXPECT_EQ(json::as_string(cross.at("feature_map"), "feature_map"), "taylor");
  EXPECT_EQ(json::as_u64(cross.at("taylor_order"), "taylor_order"), 4u);
  EXPECT_EQ(json::as_u64(cross.at("taylor_dim"), "taylor_dim"), 5u);
  EXPECT_FALSE(c.at("tarn").at("decoder_self_attention").contains("taylor_order"));  // elu1 there
}

TEST(Export, ReloadedHybridExportGivesIdenticalPerplexity) {
  const std::string dir = expect_reloaded_export_gives_identical_perplexity("hybrid");
  const SafetensorsFile f = load_safetensors(dir + "/export/model.safetensors");
  EXPECT_TRUE(f.find("model.encoder.layers.0.self_attn.hybrid_gate.weight"));
  EXPECT_TRUE(f.find("model.decoder.layers.1.self_attn.hybrid_gate.bias"));
  EXPECT_TRUE(f.find("model.decoder.layers.0.encoder_attn.hybrid_gate.weight"));  // hybrid cross-attention
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  const json::Json& dec = c.at("tarn").at("decoder_self_attention");
  EXPECT_EQ(json::as_string(dec.at("kind"), "kind"), "hybrid");
  EXPECT_EQ(json::as_u64(dec.at("window"), "window"), 3u);
  EXPECT_EQ(json::as_string(dec.at("feature_map"), "feature_map"), "elu1");
  const json::Json& cross = c.at("tarn").at("cross_attention");
  EXPECT_EQ(json::as_string(cross.at("kind"), "kind"), "hybrid");
  EXPECT_EQ(json::as_u64(cross.at("window"), "window"), 4u);
}

TEST(Export, ReloadedHybridOverDeltaExportGivesIdenticalPerplexity) {
  const std::string dir = expect_reloaded_export_gives_identical_perplexity("hybrid_delta");
  const SafetensorsFile f = load_safetensors(dir + "/export/model.safetensors");
  for (const char* name : {"model.encoder.layers.0.self_attn.hybrid_gate.weight",
                           "model.decoder.layers.1.self_attn.delta.q_conv", "model.decoder.layers.1.self_attn.delta.A_log",
                           "model.encoder.layers.1.self_attn.delta.gate_proj.weight"})
    EXPECT_TRUE(f.find(name)) << name;
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  const json::Json& dec = c.at("tarn").at("decoder_self_attention");
  EXPECT_EQ(json::as_string(dec.at("kind"), "kind"), "hybrid");
  EXPECT_EQ(json::as_string(dec.at("global"), "global"), "delta");
  EXPECT_EQ(json::as_u64(dec.at("conv_size"), "conv_size"), 4u);
  EXPECT_FALSE(dec.contains("feature_map"));  // no feature map over delta
}

TEST(Export, AttentionChosenPerLayerIsListedInConfigJson) {
  const std::string dir = testing::make_tiny_corpus("export_per_layer");
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, 2);
  o.overrides.push_back("model.attention.decoder_self={layers: [softmax, {kind: hybrid, window: 5}]}");
  o.overrides.push_back("validation.every_steps=0");
  train(o);
  export_checkpoint(dir + "/run", dir + "/export");
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  const json::Json& layers = c.at("tarn").at("decoder_self_attention").at("layers");
  ASSERT_NE(layers, nullptr);
  const std::vector<json::Json>& items = json::items(layers, "layers");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(json::as_string(items[0].at("kind"), "kind"), "softmax");
  EXPECT_EQ(json::as_string(items[1].at("kind"), "kind"), "hybrid");
  EXPECT_EQ(json::as_u64(items[1].at("window"), "window"), 5u);
  EXPECT_FALSE(c.at("tarn").at("encoder_self_attention").contains("layers"));  // one setting for the stack
}

TEST(Export, SoftmaxOnlyExportIsPlainBartWithoutModelingFile) {
  const std::string dir = trained_run("export_softmax", "softmax", 2);
  std::filesystem::create_directories(dir + "/export");
  write_file_atomic(dir + "/export/modeling_tarn_bart.py", "# left by an older export\n");
  export_checkpoint(dir + "/run", dir + "/export");
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  EXPECT_EQ(json::as_string(c.at("model_type"), "model_type"), "bart");
  EXPECT_EQ(json::as_string(json::items(c.at("architectures"), "architectures").at(0), "architectures"),
            "BartForConditionalGeneration");
  EXPECT_FALSE(c.contains("auto_map"));
  EXPECT_FALSE(c.contains("problem_type"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/export/modeling_tarn_bart.py"));
}

// Any kind but softmax: transformers must run the shipped modelling file or refuse
// (docs/design.md section 8, "The export format"; tests/tools/hf_export_test.sh loads it).
TEST(Export, ConfigJsonHasHuggingFaceBartFieldsAndTarnAttention) {
  const std::string dir = trained_run("export_config", "linear", 2);
  export_checkpoint(dir + "/run", dir + "/export");
  const json::Json c = json::parse(read_file(dir + "/export/config.json"), "config.json");
  EXPECT_EQ(json::as_string(c.at("model_type"), "model_type"), "tarn_bart");
  EXPECT_EQ(json::as_string(c.at("auto_map").at("AutoModelForSeq2SeqLM"), "auto_map"),
            "modeling_tarn_bart.TarnBartForConditionalGeneration");
  EXPECT_NE(json::as_string(c.at("problem_type"), "problem_type").find("trust_remote_code=True"), std::string::npos);
  EXPECT_NE(read_file(dir + "/export/modeling_tarn_bart.py").find("class TarnBartForConditionalGeneration("),
            std::string::npos);
  EXPECT_EQ(json::as_u64(c.at("tarn").at("max_source_len"), "max_source_len"), 64u);
  EXPECT_EQ(json::as_u64(c.at("d_model"), "d_model"), 64u);
  EXPECT_EQ(json::as_u64(c.at("decoder_start_token_id"), "decoder_start_token_id"), 2u);
  ASSERT_TRUE(json::find(c, "tarn"));
  EXPECT_EQ(json::as_string(c.at("tarn").at("decoder_self_attention").at("kind"), "kind"), "linear");
  const SafetensorsFile f = load_safetensors(dir + "/export/model.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_TRUE(f.find("model.shared.weight"));
  EXPECT_TRUE(f.find("final_logits_bias"));
  EXPECT_TRUE(f.find("model.decoder.layers.1.encoder_attn.k_proj.weight"));
}

// Sources as generate takes them: token ids ending with </s>.
std::vector<std::vector<int32_t>> encoded_sources(const Tokenizer& tok, std::initializer_list<const char*> lines) {
  std::vector<std::vector<int32_t>> sources;
  for (const char* line : lines) {
    sources.push_back(tok.encode(line));
    sources.back().push_back(tok.eos_id());
  }
  return sources;
}

class Generation : public ::testing::TestWithParam<const char*> {};

TEST_P(Generation, GreedyAndBeamSearchRunAndStopAtTheLengthLimit) {
  const std::string dir = trained_run(std::string("generate_") + GetParam(), GetParam(), 3);
  const TrainedModel trained = load_trained_model(dir + "/run");
  const Tokenizer& tok = *trained.tok;
  const auto sources = encoded_sources(tok, {"the red cat sees a bird .", "a small child ."});
  for (int beam : {1, 3}) {
    GenerateOptions g;
    g.beam = beam;
    g.max_length = 12;
    const auto out = generate(*trained.model, sources, g);
    ASSERT_EQ(out.size(), 2u);
    for (const auto& ids : out) {
      EXPECT_LE(static_cast<int64_t>(ids.size()), g.max_length);
      for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tok.vocab_size());
    }
    // A limit past the model's positions stops at the last position (a 3-step model rarely says </s>).
    g.max_length = int64_t{1} << 20;
    for (const auto& ids : generate(*trained.model, sources, g))
      EXPECT_LE(static_cast<int64_t>(ids.size()), trained.model->config().max_position_embeddings);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryAttentionKind, Generation, ::testing::Values("linear", "softmax", "delta", "gated", "hybrid"));

TEST(Generation, RepeatedNgramCompletionsAreTheTokensThatFollowedTheLastNMinusOne) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(repeated_ngram_completions({1, 2, 3, 1, 2}, 3), V({3}));     // 1 2 _ : 1 2 3 was seen
  EXPECT_EQ(repeated_ngram_completions({1, 2, 3, 1, 2}, 2), V({3}));     // 2 _ : 2 3 was seen
  EXPECT_EQ(repeated_ngram_completions({1, 2, 3, 1, 2}, 1), V({1, 2, 3, 1, 2}));
  EXPECT_EQ(repeated_ngram_completions({1, 2, 3, 1, 2}, 4), V({}));      // 2 3 1 2 was never followed
  EXPECT_EQ(repeated_ngram_completions({1, 2, 3, 1, 2}, 0), V({}));
  EXPECT_EQ(repeated_ngram_completions({5, 5, 5}, 2), V({5, 5}));
  EXPECT_EQ(repeated_ngram_completions({7, 8, 7, 9, 7}, 2), V({8, 9}));  // every earlier follower
  EXPECT_EQ(repeated_ngram_completions({1, 2}, 3), V({}));               // no whole 3-gram yet
  EXPECT_EQ(repeated_ngram_completions({}, 2), V({}));
}

// Where `ids` first repeats an n-gram it already held (ids.size() if never): counted here with
// a set of the n-grams seen, independently of repeated_ngram_completions.
size_t first_repeated_ngram(const std::vector<int32_t>& ids, size_t n) {
  std::set<std::vector<int32_t>> seen;
  for (size_t t = n - 1; t < ids.size(); ++t) {
    if (!seen.insert(std::vector<int32_t>(ids.begin() + (t + 1 - n), ids.begin() + t + 1)).second) return t;
  }
  return ids.size();
}

// A 10-step model loops on one token: with --no-repeat-ngram 2 no output holds a bigram twice,
// and greedy decoding agrees with the unconstrained one up to where that one first repeats.
TEST(Generation, NoRepeatNgramLeavesNoNgramTwiceInGreedyOrBeamOutput) {
  const std::string dir = trained_run("generate_no_repeat", "linear", 10);
  const TrainedModel trained = load_trained_model(dir + "/run");
  const auto sources =
      encoded_sources(*trained.tok, {"the red cat sees a bird .", "a small child .", "every stone in the old wall ."});
  for (int beam : {1, 3}) {
    GenerateOptions g;
    g.beam = beam;
    g.max_length = 24;
    const auto free_running = generate(*trained.model, sources, g);
    g.no_repeat_ngram = 2;
    const auto constrained = generate(*trained.model, sources, g);
    ASSERT_EQ(constrained.size(), sources.size());
    bool some_repeat = false;
    for (size_t i = 0; i < sources.size(); ++i) {
      const size_t r = first_repeated_ngram(free_running[i], 2);
      some_repeat = some_repeat || r < free_running[i].size();
      EXPECT_EQ(first_repeated_ngram(constrained[i], 2), constrained[i].size()) << "beam " << beam << ", source " << i;
      if (beam > 1) continue;
      ASSERT_GE(constrained[i].size(), r) << "source " << i;
      EXPECT_TRUE(std::equal(free_running[i].begin(), free_running[i].begin() + r, constrained[i].begin()))
          << "source " << i;
      if (r < free_running[i].size() && r < constrained[i].size()) {  // else it ended there
        EXPECT_NE(constrained[i][r], free_running[i][r]) << "source " << i;
      }
    }
    EXPECT_TRUE(some_repeat) << "beam " << beam << ": no output repeated a bigram, so the test shows nothing";
  }
}

TEST(Generation, GreedyEqualsArgmaxOfTeacherForcedLogits) {
  const std::string dir = trained_run("greedy_tf", "linear", 10);
  const TrainedModel trained = load_trained_model(dir + "/run");
  const Tokenizer& tok = *trained.tok;
  std::vector<int32_t> src = tok.encode("the old tree holds every stone .");
  src.push_back(tok.eos_id());
  GenerateOptions g;
  g.max_length = 10;
  const std::vector<int32_t> out = generate(*trained.model, {src}, g).at(0);
  // Feeding </s> + out[:-1] in one teacher-forced pass must predict out position by position.
  const BartForConditionalGeneration& model = *trained.model;
  std::vector<int32_t> dec{model.config().decoder_start_token_id};
  dec.insert(dec.end(), out.begin(), out.end());
  NoGradGuard no_grad;
  const Tensor logits = model.forward(src, Shape{1, static_cast<int64_t>(src.size())}, {}, dec,
                                      Shape{1, static_cast<int64_t>(dec.size())});
  const int64_t v = logits.size(-1);
  for (size_t t = 0; t < out.size(); ++t) {
    const float* row = logits.f32() + t * v;
    EXPECT_EQ(std::max_element(row, row + v) - row, out[t]) << "position " << t;
  }
}

// The decoding memory bound: linear attention's state does not grow with the length, softmax's
// cache grows by two d_model vectors per token and layer (held twice while it is copied), every
// part grows with the hypotheses, and past the budget decoding is refused naming the flags.
TEST(Generation, DecodingMemoryCountsTheSoftmaxCacheAndIsRefusedPastTheBudget) {
  BartConfig linear = BartConfig::preset("small").with_attention(AttentionConfig::linear_attention());
  linear.vocab_size = 8000;
  BartConfig softmax = linear;
  softmax.with_attention(AttentionConfig::softmax_attention());
  EXPECT_EQ(decoding_memory_bytes(linear, 4, 20, 100), decoding_memory_bytes(linear, 4, 20, 400));
  EXPECT_DOUBLE_EQ(decoding_memory_bytes(linear, 8, 20, 100), 2 * decoding_memory_bytes(linear, 4, 20, 100));
  const double per_token = 4.0 * linear.decoder_layers * 2 * 2 * 4 * linear.d_model;  // rows, layers, copy, k+v, f32
  EXPECT_DOUBLE_EQ(decoding_memory_bytes(softmax, 4, 20, 400) - decoding_memory_bytes(softmax, 4, 20, 100),
                   300 * per_token);
  EXPECT_EQ(decoding_memory_bytes(softmax, 4, 20, 100000), decoding_memory_bytes(softmax, 4, 20, 512))
      << "no token past max_positions is generated";

  GenerateOptions g;
  g.beam = 4;
  g.max_length = 400;
  const double need = decoding_memory_bytes(softmax, 4, 20, 400);
  EXPECT_NO_THROW(check_decoding_memory(softmax, 4, 20, g, need));
  try {
    check_decoding_memory(softmax, 4, 20, g, need - 1);
    ADD_FAILURE() << "decoding past the budget was not refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"--beam 4", "--max-length 400", "keeps every token's keys and values", "lower --beam"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " missing from: " << what;
  }
}

}  // namespace
}  // namespace tarn::app
