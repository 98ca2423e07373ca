#include "app/hf_config.h"

#include <set>
#include <sstream>

#include "data/special_ids.h"
#include "framework/io/atomic_file.h"
#include "kernels/check.h"

namespace tarn::app {
namespace {

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

std::string yaml_string(const std::string& s) { return json::quote(s); }  // JSON strings are YAML

}  // namespace

HfConfig::HfConfig(const std::string& path) : HfConfig(read_file(path), path) {}

HfConfig::HfConfig(std::string_view text, const std::string& path) : path_(path), root_(json::parse(text, path)) {
  TARN_CHECK(root_.is_object(), path_, ": expected a JSON object");
}

void HfConfig::refuse(const std::string& key, const std::string& why) const {
  const json::Json* v = find(key);
  throw Error(str_cat(path_, ": ", key, " = ", v ? v->dump() : std::string("(absent)"), ": ", why));
}

int64_t HfConfig::integer(const std::string& key) const {
  const json::Json* v = find(key);
  if (!v) refuse(key, "missing (tarn needs it to build the model)");
  if (!v->is_number_unsigned())
    refuse(key, "expected a non-negative integer");
  return static_cast<int64_t>(json::as_u64(*v, key));
}

double HfConfig::number(const std::string& key, double absent) const {
  const json::Json* v = find(key);
  if (!v || v->is_null()) return absent;
  if (!v->is_number()) refuse(key, "expected a number");
  return json::as_double(*v, key);
}

bool HfConfig::boolean(const std::string& key, bool absent) const {
  const json::Json* v = find(key);
  if (!v || v->is_null()) return absent;
  if (!v->is_boolean()) refuse(key, "expected true or false");
  return json::as_bool(*v, key);
}

void HfConfig::id_is(const std::string& key, int64_t want, bool null_ok) const {
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

std::vector<std::string> HfConfig::unknown_and_not_applied(std::vector<std::string>& not_applied) const {
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

void check_special_ids(const HfConfig& c, bool pad_may_be_null) {
  c.id_is("bos_token_id", kBosId, true);
  c.id_is("pad_token_id", kPadId, pad_may_be_null);
  c.id_is("eos_token_id", kEosId, true);
  c.id_is("decoder_start_token_id", kEosId, true);
  c.id_is("forced_eos_token_id", kEosId, true);
  c.id_is("forced_bos_token_id", kBosId, true);
}

void check_hf_bart_config(const HfConfig& cfg, std::vector<std::string>& not_applied) {
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
  const std::vector<std::string> unknown = cfg.unknown_and_not_applied(not_applied);
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& u : unknown) list += "\n  " + u;
    TARN_CHECK(false, cfg.path(), ": field(s) tarn does not know, so cannot promise to compute as HuggingFace does:",
               list);
  }
}

void check_hf_generation_config(const HfConfig& gen, std::vector<std::string>& not_applied) {
  check_special_ids(gen, /*pad_may_be_null=*/true);
  for (const auto& [key, value] : json::members(gen.root(), gen.path()))
    if (key != "_from_model_config" && key != "transformers_version" && key.find("token_id") == std::string::npos)
      not_applied.push_back("generation_config.json " + key + "=" + value.dump());
}

std::string hf_bart_recipe_yaml(const HfConfig& cfg, const std::string& out_dir, const std::string& tokenizer_path) {
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
    << "  tokenizer: {model: " << yaml_string(tokenizer_path) << "}\n"
    << "  max_source_len: " << positions << "\n  max_target_len: " << positions << "\n"
    << "checkpoints:\n  dir: " << yaml_string(out_dir) << "\n";
  return y.str();
}

}  // namespace tarn::app
