// `tarn import` against HuggingFace on the committed fixture (tests/fixtures/hf_bart_tiny, made
// by tools/fixtures/make_hf_bart_fixture.py with transformers): the imported model scores and
// generates as BartForConditionalGeneration does, and what tarn cannot represent is refused.
#include "app/hf_import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

#include "data/special_ids.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "tests/app/app_test_util.h"
#include "app/evaluate.h"
#include "app/generate.h"
#include "app/session.h"
#include "app/trained_model.h"

namespace tarn::app {
namespace {

namespace fs = std::filesystem;
const std::string kFixture = std::string(TARN_SOURCE_DIR) + "/tests/fixtures/hf_bart_tiny";

json::Json expected() {
  const std::string path = kFixture + "/expected.json";
  return json::parse(read_file(path), path);
}

std::vector<int32_t> ids_of(const json::Json& array) {
  std::vector<int32_t> out;
  for (const json::Json& v : json::items(array, "ids")) out.push_back(static_cast<int32_t>(json::as_u64(v, "id")));
  return out;
}

// A copy of the fixture's HF folder that a test may damage.
std::string hf_copy(const std::string& name) {
  const std::string dir = testing::fresh_dir("hf_" + name);
  fs::copy(kFixture + "/hf", dir + "/hf", fs::copy_options::recursive);
  return dir + "/hf";
}

std::string refusal(const std::string& hf, const std::string& name) {
  try {
    import_hf_bart(hf, testing::fresh_dir("hf_out_" + name));
  } catch (const InternalError& e) {
    return std::string("internal error (exit 1, not 2): ") + e.what();
  } catch (const Error& e) {  // tarn's command line: exit 2
    return e.what();
  }
  return "accepted";
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.f32()[i] != b.f32()[i]) return false;
  return true;
}

void set_config_field(const std::string& hf, const std::string& key, const std::string& value_json) {
  const std::string path = hf + "/config.json";
  json::Json c = json::parse(read_file(path), path);
  c[key] = json::parse(value_json, "value");
  write_file_atomic(path, json::dump(c, 2));
}

TEST(HfImport, ImportedModelGivesHuggingFacesMeanNllOnPairs) {
  const std::string out = testing::fresh_dir("hf_nll");
  import_hf_bart(kFixture + "/hf", out);
  TrainedModel l = load_trained_model(out);
  EXPECT_EQ(l.tok->kind(), Tokenizer::Kind::byte_level_bpe);
  EXPECT_TRUE(l.recipe.data.bos);
  auto ds = open_dataset(l.recipe, *l.tok, kFixture + "/pairs.tsv", kEvalNoiseSeed, "eval");
  const EvalResult r = evaluate(*l.model, *ds, 4096);
  const json::Json e = expected();
  const double hf = json::as_double(e.at("pairs_mean_nll"), "nll");
  EXPECT_EQ(r.tokens, static_cast<int64_t>(json::as_u64(e.at("pairs_target_tokens"), "tokens")));
  EXPECT_NEAR(r.mean_nll(), hf, 1e-5 * hf) << "tarn " << r.mean_nll() << ", HF " << hf;
  // Small batches (about one example each, other padding) give the same figure.
  const EvalResult one = evaluate(*l.model, *ds, 48);
  EXPECT_GT(one.batches, r.batches);
  EXPECT_NEAR(one.mean_nll(), hf, 1e-5 * hf);
}

TEST(HfImport, ImportedModelGeneratesGreedilyAsHuggingFace) {
  const std::string out = testing::fresh_dir("hf_generate");
  import_hf_bart(kFixture + "/hf", out);
  TrainedModel l = load_trained_model(out);
  const json::Json e = expected();
  GenerateOptions g;
  g.max_length = static_cast<int64_t>(json::as_u64(e.at("generate_max_length"), "max")) - 1;  // HF counts </s> first
  g.forced_bos = g.forced_eos = true;
  int same = 0, total = 0;
  for (const json::Json& item : json::items(e.at("greedy"), "greedy")) {
    std::vector<int32_t> source = l.tok->encode(json::as_string(item.at("source"), "source"));
    source.insert(source.begin(), kBosId);
    source.push_back(kEosId);
    ASSERT_EQ(source, ids_of(item.at("source_ids")));
    std::vector<int32_t> want = ids_of(item.at("output_ids"));  // </s> <s> ... [</s>]
    ASSERT_EQ(want.front(), kEosId);
    want.erase(want.begin());
    if (want.back() == kEosId) want.pop_back();  // tarn returns the output without </s>
    const std::vector<int32_t> got = generate(*l.model, {source}, g).at(0);
    EXPECT_EQ(got, want) << json::as_string(item.at("source"), "source");
    EXPECT_EQ(l.tok->decode(got), json::as_string(item.at("output_text"), "text"));  // HF's decode, U+FFFD and all
    same += got == want;
    ++total;
  }
  EXPECT_EQ(same, total);
  EXPECT_GE(total, 10);
}

TEST(HfImport, TiedCopiesAreDroppedAndUntiedEmbeddingsRefused) {
  const std::string hf = hf_copy("tied");
  const std::string st = hf + "/model.safetensors";
  SafetensorsFile f = load_safetensors(st);
  TensorList tensors = f.tensors;
  const Tensor shared = f.at("model.shared.weight");
  tensors.emplace_back("lm_head.weight", shared.clone());
  tensors.emplace_back("model.encoder.embed_tokens.weight", shared.clone());
  save_safetensors(st, tensors, {{"format", "pt"}});
  const ImportResult r = import_hf_bart(hf, testing::fresh_dir("hf_tied_out"));
  EXPECT_EQ(r.dropped.size(), 2u);

  Tensor other = shared.clone();
  other.f32()[5] += 1.0f;
  tensors.back().second = other;
  save_safetensors(st, tensors, {{"format", "pt"}});
  const std::string why = refusal(hf, "untied");
  EXPECT_NE(why.find("model.encoder.embed_tokens.weight differs from model.shared.weight"), std::string::npos) << why;
}

TEST(HfImport, ReadsABartModelCheckpointAsHuggingFaceDoes) {
  // facebook/bart-base is saved as BartModel: names without "model.", no final_logits_bias.
  const std::string hf = hf_copy("base_model");
  const std::string st = hf + "/model.safetensors";
  SafetensorsFile f = load_safetensors(st);
  TensorList tensors;
  for (const auto& [name, t] : f.tensors)
    if (name != "final_logits_bias") tensors.emplace_back(name.substr(std::string("model.").size()), t);
  save_safetensors(st, tensors, {{"format", "pt"}});
  const std::string out = testing::fresh_dir("hf_base_model_out");
  const ImportResult r = import_hf_bart(hf, out);
  EXPECT_EQ(r.notes.size(), 2u);
  const SafetensorsFile imported = load_safetensors(out + "/step_0/model.safetensors");
  EXPECT_TRUE(same_tensor(imported.at("model.encoder.layers.1.fc2.weight"), f.at("model.encoder.layers.1.fc2.weight")));
  const Tensor& bias = imported.at("final_logits_bias");
  for (int64_t i = 0; i < bias.numel(); ++i) ASSERT_EQ(bias.f32()[i], 0.0f);
}

TEST(HfImport, TakesTheFieldsOfBartBasesConfigJson) {
  // The fields facebook/bart-base's config.json has beyond the fixture's, with its values.
  const std::string hf = hf_copy("bart_base_fields");
  const std::pair<const char*, const char*> fields[] = {
      {"_name_or_path", "\"bart-base\""},   {"add_bias_logits", "false"},
      {"add_final_layer_norm", "false"},   {"architectures", "[\"BartModel\"]"},
      {"classif_dropout", "0.1"},          {"early_stopping", "true"},
      {"forced_bos_token_id", "0"},        {"gradient_checkpointing", "false"},
      {"no_repeat_ngram_size", "3"},       {"normalize_before", "false"},
      {"normalize_embedding", "true"},     {"num_beams", "4"},
      {"num_hidden_layers", "2"},          {"transformers_version", "\"4.12.0.dev0\""},
      {"task_specific_params", "{\"summarization\": {\"length_penalty\": 1.0, \"max_length\": 128}}"}};
  for (const auto& [key, value] : fields) set_config_field(hf, key, value);
  const ImportResult r = import_hf_bart(hf, testing::fresh_dir("hf_bart_base_fields_out"));
  std::string listed;
  for (const std::string& n : r.not_applied) listed += n + " ";
  for (const char* key : {"num_beams=4", "no_repeat_ngram_size=3", "early_stopping=true", "task_specific_params="})
    EXPECT_NE(listed.find(key), std::string::npos) << key << " is not listed as not applied: " << listed;
}

TEST(HfImport, RefusesConfigFieldsTarnCannotRepresentNamingThem) {
  const struct {
    const char* key;
    const char* value;
    const char* says;
  } cases[] = {
      {"normalize_before", "true", "normalize_before = true"},
      {"add_final_layer_norm", "true", "add_final_layer_norm = true"},
      {"activation_function", "\"relu\"", "activation_function = \"relu\""},
      {"decoder_attention_heads", "2", "decoder_attention_heads = 2"},
      {"decoder_ffn_dim", "48", "decoder_ffn_dim = 48"},
      {"pad_token_id", "0", "pad_token_id = 0"},
      {"encoder_layerdrop", "0.1", "encoder_layerdrop = 0.1"},
      {"model_type", "\"mbart\"", "model_type = \"mbart\""},
      {"rope_theta", "10000", "rope_theta = 10000"},  // a field tarn does not know
  };
  for (const auto& c : cases) {
    const std::string hf = hf_copy(c.key);
    set_config_field(hf, c.key, c.value);
    const std::string why = refusal(hf, c.key);
    EXPECT_NE(why.find(c.says), std::string::npos) << c.key << ": " << why;
    EXPECT_NE(why.find("config.json"), std::string::npos) << why;
  }
}

// Sizes far beyond the weights were allocated before load_state_dict compared them (20 million
// layers: out of memory, or std::bad_alloc, exit 1); they are refused first now, naming config.json.
// (max_position_embeddings is bounded before: data.max_source_len must fit training.tokens_per_batch.)
TEST(HfImport, RefusesSizesBeyondItsWeightsBeforeBuildingTheModel) {
  const struct {
    const char* name;
    std::vector<std::pair<const char*, const char*>> fields;
    const char* says;
  } cases[] = {
      {"layers", {{"encoder_layers", "20000000"}, {"num_hidden_layers", "20000000"}}, "encoder_layers 20000000"},
      {"d_model", {{"d_model", "1073741824"}}, "d_model 1073741824"},
      {"ffn", {{"encoder_ffn_dim", "1000000000"}, {"decoder_ffn_dim", "1000000000"}}, "ffn_dim 1000000000"},
  };
  for (const auto& c : cases) {
    const std::string hf = hf_copy(std::string("huge_") + c.name);
    for (const auto& [key, value] : c.fields) set_config_field(hf, key, value);
    const std::string why = refusal(hf, std::string("huge_") + c.name);
    EXPECT_NE(why.find("config.json: its sizes"), std::string::npos) << c.name << ": " << why;
    EXPECT_NE(why.find(c.says), std::string::npos) << c.name << ": " << why;
    EXPECT_NE(why.find("does not describe these weights"), std::string::npos) << c.name << ": " << why;
  }
}

TEST(HfImport, RefusesMissingFilesOtherTokenizersAndDamagedWeights) {
  {
    const std::string hf = hf_copy("no_weights");
    fs::remove(hf + "/model.safetensors");
    const std::string why = refusal(hf, "no_weights");
    EXPECT_NE(why.find("model.safetensors: missing"), std::string::npos) << why;
  }
  {
    const std::string hf = hf_copy("no_config");
    fs::remove(hf + "/config.json");
    const std::string why = refusal(hf, "no_config");
    EXPECT_NE(why.find("config.json: missing"), std::string::npos) << why;
  }
  {
    const std::string hf = hf_copy("no_tokenizer");
    for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt"}) fs::remove(hf + "/" + f);
    const std::string why = refusal(hf, "no_tokenizer");
    EXPECT_NE(why.find("no tokenizer"), std::string::npos) << why;
    write_file_atomic(hf + "/sentencepiece.bpe.model", "x");
    const std::string spm = refusal(hf, "spm_tokenizer");
    EXPECT_NE(spm.find("sentencepiece.bpe.model: a SentencePiece tokenizer"), std::string::npos) << spm;
  }
  {
    const std::string hf = hf_copy("wordpiece");
    std::string t = read_file(hf + "/tokenizer.json");
    t.replace(t.find("\"type\": \"BPE\""), 13, "\"type\": \"WordPiece\"");
    write_file_atomic(hf + "/tokenizer.json", t);
    const std::string why = refusal(hf, "wordpiece");
    EXPECT_NE(why.find("model.type is \"WordPiece\""), std::string::npos) << why;
  }
  {
    const std::string hf = hf_copy("truncated");
    const std::string st = hf + "/model.safetensors";
    const std::string bytes = read_file(st);
    write_file_atomic(st, bytes.substr(0, bytes.size() - 1000));
    const std::string why = refusal(hf, "truncated");
    EXPECT_NE(why.find("model.safetensors"), std::string::npos) << why;
    EXPECT_EQ(why.find("internal error"), std::string::npos) << why;
  }
  {
    const std::string hf = hf_copy("header");
    const std::string st = hf + "/model.safetensors";
    std::string bytes = read_file(st);
    bytes[12] = '[';  // the JSON header no longer an object
    write_file_atomic(st, bytes);
    const std::string why = refusal(hf, "header");
    EXPECT_NE(why.find("model.safetensors"), std::string::npos) << why;
    EXPECT_EQ(why.find("internal error"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace tarn::app
