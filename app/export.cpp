#include "app/export.h"

#include <sys/stat.h>

#include <filesystem>

#include "data/byte_level_bpe.h"
#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/log/log.h"
#include "layers/bart.h"
#include "app/checkpoint_state.h"
#include "app/session.h"
#include "app/modeling_tarn_bart_py.h"

namespace tarn::app {
namespace {

json::Value attention_json(const AttentionConfig& a) {
  json::Value o = json::Value::object();
  o.set("kind", json::Value::string(attention_kind_name(a.kind)));
  if (a.is_hybrid()) {
    o.set("window", json::Value::number(a.window));
    o.set("global", json::Value::string(attention_kind_name(a.global)));
  }
  if (a.uses_feature_map()) {
    o.set("feature_map", json::Value::string(kernels::cpu::feature_map_name(a.feature_map)));
    o.set("chunk", json::Value::number(a.chunk));
    o.set("favor_features", json::Value::number(a.favor_features));
    if (a.feature_map == kernels::cpu::FeatureMap::taylor) {
      o.set("taylor_order", json::Value::number(a.taylor_order));
      o.set("taylor_dim", json::Value::number(a.taylor_dim));
    }
    o.set("eps", json::Value::number(a.eps));
    if (a.is_aligned()) o.set("align_decay", json::Value::number(a.align_decay));
    if (a.is_gated_aligned()) o.set("align_gate", json::Value::boolean(true));
  }
  if (a.has_delta_block()) {
    o.set("conv_size", json::Value::number(a.conv_size));
    o.set("chunk", json::Value::number(a.chunk));
  }
  return o;
}

// A stack's settings, with "layers": one object per layer when the recipe chose them per layer.
json::Value stack_json(const AttentionStackRecipe& stack) {
  json::Value o = attention_json(stack);
  if (stack.per_layer.empty()) return o;
  std::vector<json::Value> layers;
  for (const AttentionConfig& a : stack.per_layer) layers.push_back(attention_json(a));
  o.set("layers", json::Value::array(layers));
  return o;
}

constexpr const char* kNotPlainBart =
    "tarn_bart (not softmax attention): BartForConditionalGeneration would compute another model; load it with "
    "AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)";

// True when every layer of every stack is softmax: HF's own BART computes that model.
bool softmax_only(const Recipe& r) {
  for (const AttentionStackRecipe* s : {&r.model.attention.encoder_self, &r.model.attention.decoder_self,
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
  using json::Value;
  Value o = Value::object();
  if (softmax_only(r)) {
    o.set("architectures", Value::array({Value::string("BartForConditionalGeneration")}));
    o.set("model_type", Value::string("bart"));
  } else {
    o.set("architectures", Value::array({Value::string("TarnBartForConditionalGeneration")}));
    o.set("model_type", Value::string("tarn_bart"));
    Value m = Value::object();
    m.set("AutoConfig", Value::string("modeling_tarn_bart.TarnBartConfig"));
    m.set("AutoModelForSeq2SeqLM", Value::string("modeling_tarn_bart.TarnBartForConditionalGeneration"));
    o.set("auto_map", m);
    o.set("problem_type", Value::string(kNotPlainBart));
  }
  o.set("vocab_size", Value::number(c.vocab_size));
  o.set("d_model", Value::number(c.d_model));
  o.set("encoder_layers", Value::number(c.encoder_layers));
  o.set("decoder_layers", Value::number(c.decoder_layers));
  o.set("encoder_attention_heads", Value::number(c.encoder_attention_heads));
  o.set("decoder_attention_heads", Value::number(c.decoder_attention_heads));
  o.set("encoder_ffn_dim", Value::number(c.encoder_ffn_dim));
  o.set("decoder_ffn_dim", Value::number(c.decoder_ffn_dim));
  o.set("max_position_embeddings", Value::number(c.max_position_embeddings));
  o.set("activation_function", Value::string("gelu"));
  o.set("dropout", Value::number(static_cast<double>(c.dropout)));
  o.set("attention_dropout", Value::number(static_cast<double>(c.attention_dropout)));
  o.set("activation_dropout", Value::number(static_cast<double>(c.activation_dropout)));
  o.set("classifier_dropout", Value::number(0.0));
  o.set("init_std", Value::number(static_cast<double>(c.init_std)));
  o.set("encoder_layerdrop", Value::number(0.0));
  o.set("decoder_layerdrop", Value::number(0.0));
  o.set("scale_embedding", Value::boolean(c.scale_embedding));
  o.set("use_cache", Value::boolean(true));
  o.set("is_encoder_decoder", Value::boolean(true));
  o.set("tie_word_embeddings", Value::boolean(true));
  o.set("bos_token_id", Value::number(static_cast<int64_t>(c.bos_token_id)));
  o.set("pad_token_id", Value::number(static_cast<int64_t>(c.pad_token_id)));
  o.set("eos_token_id", Value::number(static_cast<int64_t>(c.eos_token_id)));
  o.set("decoder_start_token_id", Value::number(static_cast<int64_t>(c.decoder_start_token_id)));
  o.set("forced_eos_token_id", Value::number(static_cast<int64_t>(c.eos_token_id)));
  // data.bos (an imported BART): HF's tokenizer starts targets with <s>, and generation forces it.
  if (r.data.bos) o.set("forced_bos_token_id", Value::number(static_cast<int64_t>(c.bos_token_id)));
  o.set("torch_dtype", Value::string("float32"));
  Value t = Value::object();
  t.set("encoder_self_attention", stack_json(r.model.attention.encoder_self));
  t.set("decoder_self_attention", stack_json(r.model.attention.decoder_self));
  t.set("cross_attention", stack_json(r.model.attention.cross));
  t.set("layer_norm_eps", Value::number(static_cast<double>(c.layer_norm_eps)));
  t.set("tokenizer", Value::string(tokenizer));
  t.set("max_source_len", Value::number(r.data.max_source_len));
  t.set("max_target_len", Value::number(r.data.max_target_len));
  o.set("tarn", t);
  return o.dump(2) + "\n";
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
