#include "app/export.h"

#include <sys/stat.h>

#include <filesystem>

#include "data/byte_level_bpe.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/log/log.h"
#include "layers/attention/registry.h"
#include "layers/bart.h"
#include "app/checkpoint_state.h"
#include "app/session.h"
#include "app/modeling_tarn_bart_py.h"

namespace tarn::app {
namespace {

// {"kind": ..., settings...}, as the kind writes them (layers/attention/registry.h).
json::Json attention_json(const AttentionConfig& a) { return attention_export_settings(a); }

// A stack's settings, with "layers": one object per layer when the recipe chose them per layer.
json::Json stack_json(const AttentionStack& stack) {
  json::Json o = attention_json(stack);
  if (stack.per_layer.empty()) return o;
  std::vector<json::Json> layers;
  for (const AttentionConfig& a : stack.per_layer) layers.push_back(attention_json(a));
  o["layers"] = layers;
  return o;
}

constexpr const char* kNotPlainBart =
    "tarn_bart (not softmax attention): BartForConditionalGeneration would compute another model; load it with "
    "AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)";

// True when every layer of every stack is softmax: HF's own BART computes that model.
bool softmax_only(const Recipe& r) {
  for (const AttentionStack* s : {&r.model.attention.encoder_self, &r.model.attention.decoder_self,
                                  &r.model.attention.cross}) {
    if (s->per_layer.empty() && !s->is_softmax()) return false;
    for (const AttentionConfig& a : s->per_layer)
      if (!a.is_softmax()) return false;
  }
  return true;
}

// HF's BartConfig fields (transformers/models/bart/configuration_bart.py) and tarn's settings
// under "tarn" (docs/design.md section 8). A softmax-only model is plain "bart", which
// BartForConditionalGeneration computes exactly. Any other is "tarn_bart": its auto_map names
// modeling_tarn_bart.py, written beside it, and "problem_type" holds a value that
// PretrainedConfig refuses with its text (naming trust_remote_code), so that
// BartForConditionalGeneration.from_pretrained fails instead of running softmax attention
// (transformers 4.44 only warns about a model_type it does not expect; TarnBartConfig takes
// the key back out).
// `tokenizer`: the file the export's tokenizer is in (spm.model, or an imported model's
// tokenizer.json).
std::string config_json(const BartConfig& c, const Recipe& r, const std::string& tokenizer) {
  json::Json o = json::Json::object();
  if (softmax_only(r)) {
    o["architectures"] = json::Json::array({json::Json("BartForConditionalGeneration")});
    o["model_type"] = "bart";
  } else {
    o["architectures"] = json::Json::array({json::Json("TarnBartForConditionalGeneration")});
    o["model_type"] = "tarn_bart";
    json::Json m = json::Json::object();
    m["AutoConfig"] = "modeling_tarn_bart.TarnBartConfig";
    m["AutoModelForSeq2SeqLM"] = "modeling_tarn_bart.TarnBartForConditionalGeneration";
    o["auto_map"] = m;
    o["problem_type"] = kNotPlainBart;
  }
  o["vocab_size"] = c.vocab_size;
  o["d_model"] = c.d_model;
  o["encoder_layers"] = c.encoder_layers;
  o["decoder_layers"] = c.decoder_layers;
  o["encoder_attention_heads"] = c.heads;
  o["decoder_attention_heads"] = c.heads;
  o["encoder_ffn_dim"] = c.ffn_dim;
  o["decoder_ffn_dim"] = c.ffn_dim;
  o["max_position_embeddings"] = c.max_position_embeddings;
  o["activation_function"] = "gelu";
  o["dropout"] = static_cast<double>(c.dropout);
  o["attention_dropout"] = static_cast<double>(c.attention_dropout);
  o["activation_dropout"] = static_cast<double>(c.activation_dropout);
  o["classifier_dropout"] = 0.0;
  o["init_std"] = static_cast<double>(c.init_std);
  o["encoder_layerdrop"] = 0.0;
  o["decoder_layerdrop"] = 0.0;
  o["scale_embedding"] = c.scale_embedding;
  o["use_cache"] = true;
  o["is_encoder_decoder"] = true;
  o["tie_word_embeddings"] = true;
  o["bos_token_id"] = static_cast<int64_t>(c.bos_token_id);
  o["pad_token_id"] = static_cast<int64_t>(c.pad_token_id);
  o["eos_token_id"] = static_cast<int64_t>(c.eos_token_id);
  o["decoder_start_token_id"] = static_cast<int64_t>(c.decoder_start_token_id);
  o["forced_eos_token_id"] = static_cast<int64_t>(c.eos_token_id);
  // data.bos (an imported BART): HF's tokenizer starts targets with <s>, and generation forces it.
  if (r.data.bos) o["forced_bos_token_id"] = static_cast<int64_t>(c.bos_token_id);
  o["torch_dtype"] = "float32";
  json::Json t = json::Json::object();
  t["encoder_self_attention"] = stack_json(r.model.attention.encoder_self);
  t["decoder_self_attention"] = stack_json(r.model.attention.decoder_self);
  t["cross_attention"] = stack_json(r.model.attention.cross);
  t["layer_norm_eps"] = static_cast<double>(c.layer_norm_eps);
  t["tokenizer"] = tokenizer;
  t["max_source_len"] = r.data.max_source_len;
  t["max_target_len"] = r.data.max_target_len;
  o["tarn"] = t;
  return json::dump(o, 2) + "\n";
}

}  // namespace

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir) {
  const Checkpoint ckpt = open_checkpoint_or_run(checkpoint);
  const Recipe recipe = checkpoint_recipe(ckpt);
  const Tokenizer tok = Tokenizer::load(recipe.data.tokenizer.model);
  const BartConfig cfg = model_config(recipe, tok.vocab_size());
  BartForConditionalGeneration model(cfg);
  load_model_weights(ckpt, model);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  TARN_CHECK(!ec, "export: cannot create ", out_dir, ": ", ec.message());
  const std::string weights = out_dir + "/model.safetensors";
  // HF's BART has no FAVOR+ projections: they go to a file of their own, so that a strict
  // HF loader sees exactly its names and tarn can still rebuild the model.
  TensorList tensors, favor;
  for (auto& [name, t] : state_dict(model))
    (name.find("favor_projection") != std::string::npos ? favor : tensors).emplace_back(name, t);
  save_safetensors(weights, tensors, {{"format", "pt"}});
  if (!favor.empty()) save_safetensors(out_dir + "/tarn_favor_projections.safetensors", favor, {{"format", "pt"}});
  write_file_atomic(out_dir + "/config.json", config_json(cfg, recipe, tok.bpe() ? "tokenizer.json" : "spm.model"));
  const std::string modeling = out_dir + "/modeling_tarn_bart.py";
  if (!softmax_only(recipe)) write_file_atomic(modeling, kModelingTarnBartPy);
  else std::filesystem::remove(modeling, ec);  // a softmax export over an older one: plain bart
  if (const ByteLevelBpe* bpe = tok.bpe()) {  // an imported model's: the files HF's BART tokenizers read
    write_file_atomic(out_dir + "/tokenizer.json", bpe->to_tokenizer_json());
    write_file_atomic(out_dir + "/vocab.json", bpe->vocab_json());
    write_file_atomic(out_dir + "/merges.txt", bpe->merges_txt());
  } else {
    write_file_atomic(out_dir + "/spm.model", read_file(tok.path()));
  }
  check_safetensors(weights);  // the format's rules, re-read from disk: throws on any violation

  ExportResult r;
  r.dir = out_dir;
  r.tensors = static_cast<int64_t>(tensors.size());
  for (const auto& [name, t] : tensors) r.parameters += t.numel();
  struct stat st {};
  if (::stat(weights.c_str(), &st) == 0) r.bytes = static_cast<uint64_t>(st.st_size);
  return r;
}

}  // namespace tarn::app
