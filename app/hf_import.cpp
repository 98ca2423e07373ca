#include "app/hf_import.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "data/byte_level_bpe.h"
#include "data/special_ids.h"
#include "data/tokenizer.h"
#include "framework/config/config_error.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/log/log.h"
#include "layers/bart.h"
#include "app/checkpoint_state.h"
#include "app/progress.h"
#include "app/session.h"

namespace tarn::app {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// config.json fields that do not change what the model computes from its inputs: HF's
// generation defaults (tarn generate takes --beam, --max-length, --no-repeat-ngram), the labels
// of classification heads tarn has none of, and metadata. Listed on import as not applied.
const std::set<std::string> kNotApplied = {
    // generation defaults
    "num_beams", "no_repeat_ngram_size", "early_stopping", "length_penalty", "max_length", "min_length",
    "task_specific_params", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty",
    "num_return_sequences", "bad_words_ids", "diversity_penalty", "num_beam_groups", "prefix",
    "encoder_no_repeat_ngram_size", "remove_invalid_values", "typical_p", "chunk_size_feed_forward",
    "max_new_tokens", "min_new_tokens", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "forced_decoder_ids", "return_dict_in_generate", "output_scores", "sep_token_id",
    // classification heads (BartForSequenceClassification) and task labels
    "id2label", "label2id", "num_labels", "classifier_dropout", "classif_dropout", "problem_type",
    "finetuning_task",
    // metadata and PyTorch-side switches
    "architectures", "transformers_version", "torch_dtype", "_name_or_path", "use_cache", "gradient_checkpointing",
    "output_past", "return_dict", "output_hidden_states", "output_attentions", "torchscript", "tokenizer_class",
    "is_decoder", "add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder", "pruned_heads",
    "_commit_hash", "_attn_implementation_autoset", "model_type", "num_hidden_layers"};

// The fields read below; anything neither here nor in kNotApplied is refused as unknown.
const std::set<std::string> kRead = {
    "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
    "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings", "dropout",
    "attention_dropout", "activation_dropout", "init_std", "scale_embedding", "activation_function",
    "bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id", "forced_bos_token_id",
    "forced_eos_token_id", "is_encoder_decoder", "tie_word_embeddings", "encoder_layerdrop", "decoder_layerdrop",
    "normalize_before", "add_final_layer_norm", "add_bias_logits", "normalize_embedding",
    "static_position_embeddings", "extra_pos_embeddings", "layernorm_embedding", "mask_token_id"};

// config.json read field by field; each refusal names the file, the field and its value.
class HfConfig {
 public:
  HfConfig(const std::string& path) : path_(path), root_(json::parse(read_file(path), path)) {
    TARN_CHECK(root_.is_object(), path_, ": expected a JSON object");
  }
  const json::Json* find(const std::string& key) const { return json::find(root_, key); }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    const json::Json* v = find(key);
    throw Error(str_cat(path_, ": ", key, " = ", v ? v->dump() : std::string("(absent)"), ": ", why));
  }
  int64_t integer(const std::string& key) const {
    const json::Json* v = find(key);
    if (!v) refuse(key, "missing (tarn needs it to build the model)");
    if (!v->is_number_unsigned())
      refuse(key, "expected a non-negative integer");
    return static_cast<int64_t>(json::as_u64(*v, key));
  }
  double number(const std::string& key, double absent) const {
    const json::Json* v = find(key);
    if (!v || v->is_null()) return absent;
    if (!v->is_number()) refuse(key, "expected a number");
    return json::as_double(*v, key);
  }
  bool boolean(const std::string& key, bool absent) const {
    const json::Json* v = find(key);
    if (!v || v->is_null()) return absent;
    if (!v->is_boolean()) refuse(key, "expected true or false");
    return json::as_bool(*v, key);
  }
  // An id field that must be `want` (tarn's fixed special ids) or, when `null_ok`, absent/null.
  void id_is(const std::string& key, int64_t want, bool null_ok) const {
    const json::Json* v = find(key);
    if (!v || v->is_null()) {
      if (!null_ok) refuse(key, str_cat("tarn's BART needs ", want));
      return;
    }
    if (!json::is_integer(*v, static_cast<uint64_t>(want)))
      refuse(key, str_cat("tarn's special ids are fixed (<s>=0, <pad>=1, </s>=2, <unk>=3, docs/design.md section 3); "
                          "it needs ",
                          want));
  }
  std::vector<std::string> unknown_and_not_applied(std::vector<std::string>& not_applied) const {
    std::vector<std::string> unknown;
    for (const auto& [key, value] : json::members(root_, path_)) {
      if (kRead.count(key)) continue;
      if (kNotApplied.count(key)) {
        if (key != "architectures" && key != "model_type" && key != "transformers_version" &&
            key != "num_hidden_layers")
          not_applied.push_back(key + "=" + value.dump());
        continue;
      }
      unknown.push_back(key + " = " + value.dump());
    }
    return unknown;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  json::Json root_;
};

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0;
}

// The byte-level BPE of the folder, as tokenizers' tokenizer.json text.
std::string read_tokenizer(const std::string& dir, std::string* source) {
  const std::string tj = dir + "/tokenizer.json", vj = dir + "/vocab.json", mt = dir + "/merges.txt";
  if (exists(tj)) {
    *source = tj;
    return ByteLevelBpe::from_tokenizer_json(read_file(tj), tj).to_tokenizer_json();
  }
  if (exists(vj) && exists(mt)) {
    *source = vj + " + merges.txt";
    // BartTokenizer's specials; <mask> takes the space before it (lstrip), as in BART.
    return ByteLevelBpe::from_files(vj, mt, {{"<s>"}, {"<pad>"}, {"</s>"}, {"<unk>"}, {kMaskPiece, 0, true}})
        .to_tokenizer_json();
  }
  for (const char* spm : {"sentencepiece.bpe.model", "spiece.model", "spm.model", "source.spm"})
    TARN_CHECK(!exists(dir + "/" + spm), dir, "/", spm,
               ": a SentencePiece tokenizer (mBART's, T5's, Marian's): tarn imports BART's byte-level BPE only "
               "(tokenizer.json, or vocab.json + merges.txt)");
  TARN_CHECK(false, dir, ": no tokenizer: neither tokenizer.json nor vocab.json + merges.txt");
  return {};
}

// The special ids a config names (config.json, generation_config.json) must be tarn's fixed ones
// or null; config.json must name pad_token_id.
void check_special_ids(const HfConfig& c, bool pad_may_be_null) {
  c.id_is("bos_token_id", kBosId, true);
  c.id_is("pad_token_id", kPadId, pad_may_be_null);
  c.id_is("eos_token_id", kEosId, true);
  c.id_is("decoder_start_token_id", kEosId, true);
  c.id_is("forced_eos_token_id", kEosId, true);
  c.id_is("forced_bos_token_id", kBosId, true);
}

std::string yaml_string(const std::string& s) { return json::quote(s); }  // JSON strings are YAML

}  // namespace

ImportResult import_hf_bart(const std::string& hf_dir, const std::string& out_dir) {
  ImportResult r;
  TARN_CHECK(exists(hf_dir), "import: ", hf_dir, ": no such folder");
  for (const char* f : {"config.json", "model.safetensors"})
    TARN_CHECK(exists(hf_dir + "/" + f), "import: ", hf_dir, "/", f, ": missing",
               std::string(f) == "model.safetensors" && exists(hf_dir + "/pytorch_model.bin")
                   ? " (the folder has pytorch_model.bin, a pickle tarn does not read: save it with "
                     "save_pretrained(..., safe_serialization=True))"
                   : "");
  const HfConfig cfg(hf_dir + "/config.json");

  // What the model computes: refused unless tarn computes the same.
  {
    const json::Json* mt = cfg.find("model_type");
    if (!mt || !mt->is_string() || json::as_string(*mt, "model_type") != "bart")
      cfg.refuse("model_type", "tarn imports BART (model_type \"bart\") only");
  }
  if (const json::Json* a = cfg.find("architectures"); a && a->is_array())
    for (const json::Json& name : json::items(*a, "architectures"))
      if (!name.is_string() || json::as_string(name, "architectures").rfind("Bart", 0) != 0)
        cfg.refuse("architectures", "not a BART architecture");
  if (const json::Json* act = cfg.find("activation_function");
      act && !(act->is_string() && json::as_string(*act, "activation_function") == "gelu"))
    cfg.refuse("activation_function", "tarn's feed-forward uses the exact (erf) GELU, HF's \"gelu\"");
  if (cfg.boolean("normalize_before", false))
    cfg.refuse("normalize_before", "tarn's BART is post-LayerNorm (docs/design.md section 3)");
  if (cfg.boolean("add_final_layer_norm", false))
    cfg.refuse("add_final_layer_norm", "tarn's BART has no final LayerNorm after the stacks (mBART's)");
  if (cfg.boolean("add_bias_logits", false)) cfg.refuse("add_bias_logits", "tarn has no such logits bias");
  if (!cfg.boolean("normalize_embedding", true) || !cfg.boolean("layernorm_embedding", true))
    cfg.refuse(cfg.find("normalize_embedding") ? "normalize_embedding" : "layernorm_embedding",
               "tarn's BART always has LayerNorm on the embeddings");
  if (cfg.boolean("static_position_embeddings", false))
    cfg.refuse("static_position_embeddings", "tarn learns its positional embeddings (offset 2)");
  if (const json::Json* e = cfg.find("extra_pos_embeddings"); e && !json::is_integer(*e, 2))
    cfg.refuse("extra_pos_embeddings", "tarn's positions are offset by 2, as BART's");
  if (!cfg.boolean("is_encoder_decoder", true)) cfg.refuse("is_encoder_decoder", "BART is an encoder-decoder");
  for (const char* drop : {"encoder_layerdrop", "decoder_layerdrop"})
    if (cfg.number(drop, 0.0) != 0.0) cfg.refuse(drop, "tarn has no LayerDrop: only 0 trains as the model did");
  check_special_ids(cfg, /*pad_may_be_null=*/false);
  if (const int64_t eh = cfg.integer("encoder_attention_heads"), dh = cfg.integer("decoder_attention_heads"); eh != dh)
    cfg.refuse("decoder_attention_heads", str_cat("tarn has one head count for every stack (model.heads); "
                                                  "encoder_attention_heads is ", eh));
  if (const int64_t ef = cfg.integer("encoder_ffn_dim"), df = cfg.integer("decoder_ffn_dim"); ef != df)
    cfg.refuse("decoder_ffn_dim", str_cat("tarn has one feed-forward size (model.ffn_dim); encoder_ffn_dim is ", ef));
  if (const json::Json* nl = cfg.find("num_hidden_layers");
      nl && !json::is_integer(*nl, static_cast<uint64_t>(cfg.integer("encoder_layers"))))
    cfg.refuse("num_hidden_layers", "HF derives it from encoder_layers; they differ");
  const std::vector<std::string> unknown = cfg.unknown_and_not_applied(r.not_applied);
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& u : unknown) list += "\n  " + u;
    TARN_CHECK(false, cfg.path(), ": field(s) tarn does not know, so cannot promise to compute as HuggingFace does:",
               list);
  }
  // generation_config.json (transformers >= 4.26 moves the generation defaults there).
  if (const std::string gpath = hf_dir + "/generation_config.json"; exists(gpath)) {
    check_special_ids(HfConfig(gpath), /*pad_may_be_null=*/true);
    const json::Json root = json::parse(read_file(gpath), gpath);
    for (const auto& [key, value] : json::members(root, gpath))
      if (key != "_from_model_config" && key != "transformers_version" && key.find("token_id") == std::string::npos)
        r.not_applied.push_back("generation_config.json " + key + "=" + value.dump());
  }

  // The tokenizer, written where the recipe points and loaded back as tarn loads it.
  std::filesystem::create_directories(out_dir);
  const std::string tok_path = out_dir + "/tokenizer.json";
  write_file_atomic(tok_path, read_tokenizer(hf_dir, &r.tokenizer_source));
  const Tokenizer tok = Tokenizer::load(tok_path);
  if (const json::Json* m = cfg.find("mask_token_id"); m && !m->is_null()) cfg.id_is("mask_token_id", tok.mask_id(), true);

  // The recipe: every size from config.json, softmax attention everywhere, HF's data layout.
  const int64_t positions = cfg.integer("max_position_embeddings");
  std::ostringstream y;
  y << "model:\n  preset: custom\n"
    << "  vocab_size: " << cfg.integer("vocab_size") << "\n  d_model: " << cfg.integer("d_model")
    << "\n  encoder_layers: " << cfg.integer("encoder_layers") << "\n  decoder_layers: " << cfg.integer("decoder_layers")
    << "\n  heads: " << cfg.integer("encoder_attention_heads") << "\n  ffn_dim: " << cfg.integer("encoder_ffn_dim")
    << "\n  max_positions: " << positions << "\n  dropout: " << cfg.number("dropout", 0.1)
    << "\n  attention_dropout: " << cfg.number("attention_dropout", 0.0)
    << "\n  activation_dropout: " << cfg.number("activation_dropout", 0.0)
    << "\n  init_std: " << cfg.number("init_std", 0.02)
    << "\n  scale_embedding: " << (cfg.boolean("scale_embedding", false) ? "true" : "false")
    << "\n  attention: {encoder_self: {kind: softmax}, decoder_self: {kind: softmax}, cross: {kind: softmax}}\n"
    // data.train is required: OUT/train.tsv, which import does not write (a user puts pairs
    // there, or a fine-tuning recipe names its own corpus).
    << "data:\n  kind: pairs\n  train: " << yaml_string(out_dir + "/train.tsv") << "\n  bos: true\n"

    << "  tokenizer: {model: " << yaml_string(tok_path) << "}\n"
    << "  max_source_len: " << positions << "\n  max_target_len: " << positions << "\n"
    << "checkpoints:\n  dir: " << yaml_string(out_dir) << "\n";
  Recipe recipe;
  try {
    recipe = parse_recipe(y.str(), hf_dir + "/config.json (as a tarn recipe)");
  } catch (const ConfigError& e) {
    throw Error(str_cat(cfg.path(), ": a size tarn cannot take: ", e.what()));
  }

  // The weights: HF's names are tarn's (docs/design.md section 3). Copies of the shared
  // embedding (tied output layer, per-stack embed_tokens) are checked equal and dropped.
  const std::string st_path = hf_dir + "/model.safetensors";
  SafetensorsFile f = load_safetensors(st_path);
  // A BartModel checkpoint (facebook/bart-base's architectures) names the base model's tensors
  // without "model."; HF adds its base_model_prefix when BartForConditionalGeneration loads it.
  if (!f.find("model.shared.weight") && f.find("shared.weight")) {
    for (auto& [name, t] : f.tensors)
      if (name != "final_logits_bias" && name != "lm_head.weight") name = "model." + name;
    r.notes.push_back("tensor names without \"model.\" (a BartModel checkpoint): read as BartForConditionalGeneration's");
  }
  const Tensor* shared = f.find("model.shared.weight");
  if (!shared) shared = f.find("model.encoder.embed_tokens.weight");
  TARN_CHECK(shared, st_path, ": no model.shared.weight (nor model.encoder.embed_tokens.weight)");
  const Tensor shared_copy = *shared;
  TensorList tensors;
  for (auto& [name, t] : f.tensors) {
    if (name == "lm_head.weight" || name == "model.encoder.embed_tokens.weight" ||
        name == "model.decoder.embed_tokens.weight") {
      TARN_CHECK(same_values(t, shared_copy), st_path, ": ", name,
                 " differs from model.shared.weight: tarn ties the output layer and both stacks' embeddings to one "
                 "matrix (untied embeddings cannot be represented)");
      r.dropped.push_back(name);
      if (!f.find("model.shared.weight") && name == "model.encoder.embed_tokens.weight")
        tensors.emplace_back("model.shared.weight", t);
      continue;
    }
    tensors.emplace_back(name, t);
  }
  if (!f.find("lm_head.weight") && !cfg.boolean("tie_word_embeddings", true))
    TARN_CHECK(false, cfg.path(), ": tie_word_embeddings = false but ", st_path,
               " has no lm_head.weight: HF would start the output layer at random");
  BartForConditionalGeneration model(model_config(recipe, tok.vocab_size()));
  // A BartModel checkpoint has no output bias: HF starts BartForConditionalGeneration's at zero.
  if (!f.find("final_logits_bias")) {
    for (const auto& [name, t] : state_dict(model))
      if (name == "final_logits_bias") tensors.emplace_back(name, Tensor::zeros(t.shape()));
    r.notes.push_back("no final_logits_bias in " + st_path + ": zeros, as HF starts it");
  }
  load_state_dict(model, tensors, /*strict=*/true, st_path);

  AdamWOptions ao;
  AdamW optimizer(model.named_parameters(), ao);
  save_training_checkpoint(out_dir, recipe, tok, model, optimizer, Progress{});
  r.checkpoint = checkpoint_dir(out_dir, 0);
  r.tensors = static_cast<int64_t>(tensors.size());
  for (const auto& [name, t] : tensors) r.parameters += t.numel();
  return r;
}

}  // namespace tarn::app
