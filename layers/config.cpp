#include "layers/config.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "framework/model_presets.h"
#include "kernels/check.h"
#include "layers/attention/registry.h"
#include "layers/attention/settings.h"

namespace tarn {

// The sizes of the preset (framework/model_presets.h) on the defaults of every other field.
BartConfig BartConfig::preset(const std::string& name) {
  const ModelPreset* p = find_model_preset(name);
  if (!p) throw Error(str_cat("model preset: expected \"tiny\", \"small\" or \"base\", got \"", name, "\""));
  BartConfig c;
  c.vocab_size = p->vocab_size;
  c.d_model = p->d_model;
  c.encoder_layers = p->encoder_layers;
  c.decoder_layers = p->decoder_layers;
  c.encoder_attention_heads = c.decoder_attention_heads = p->heads;
  c.encoder_ffn_dim = c.decoder_ffn_dim = p->ffn_dim;
  c.max_position_embeddings = p->max_positions;
  return c;
}

BartConfig BartConfig::tiny() { return preset("tiny"); }
BartConfig BartConfig::small() { return preset("small"); }
BartConfig BartConfig::base() { return preset("base"); }

BartConfig& BartConfig::with_attention(const AttentionConfig& a) {
  encoder_self_attention = decoder_self_attention = cross_attention = a;
  encoder_self_layers.clear();
  decoder_self_layers.clear();
  cross_layers.clear();
  return *this;
}

namespace {

const AttentionConfig& layer_attention(const std::vector<AttentionConfig>& per_layer, const AttentionConfig& stack,
                                       int64_t layer) {
  if (per_layer.empty()) return stack;
  TARN_ASSERT(layer >= 0 && layer < static_cast<int64_t>(per_layer.size()), "attention of layer ", layer, ": the stack has ",
              per_layer.size(), " per-layer entries");
  return per_layer[static_cast<size_t>(layer)];
}

// One attention setting serving as `use`: its ranges (AttentionConfig::validate), then the rules
// the recipe checks (layers/attention/settings.h): alignment's, and with `kind_rules` its kind's.
// Thrown at `key`.
void validate_attention(const AttentionConfig& a, AttentionUse use, bool kind_rules, const std::string& key) {
  a.validate(key);
  SettingReport report;
  report.error = [&](const std::string& field, const std::string& message) {
    throw Error(str_cat(key, ".", field, ": ", message));
  };
  report.warn = [](const std::string&, const std::string&) {};
  check_attention_alignment(a, use, report);
  if (kind_rules) check_attention_kind(a, use, report);
}

std::string layers_str(const std::vector<AttentionConfig>& per_layer, const AttentionConfig& stack) {
  if (per_layer.empty()) return stack.str();
  std::string s = "[";
  for (size_t i = 0; i < per_layer.size(); ++i) s += (i ? ", " : "") + per_layer[i].str();
  return s + "]";
}

}  // namespace

const AttentionConfig& BartConfig::encoder_self_attention_of(int64_t layer) const {
  return layer_attention(encoder_self_layers, encoder_self_attention, layer);
}
const AttentionConfig& BartConfig::decoder_self_attention_of(int64_t layer) const {
  return layer_attention(decoder_self_layers, decoder_self_attention, layer);
}
const AttentionConfig& BartConfig::cross_attention_of(int64_t layer) const {
  return layer_attention(cross_layers, cross_attention, layer);
}

namespace {

void check_probability(float p, const std::string& key) {
  TARN_CHECK(p >= 0.0f && p < 1.0f, key, ": expected a probability in [0, 1), got ", p);
}

}  // namespace

void BartConfig::validate(const std::string& prefix) const {
  auto positive = [&](int64_t v, const char* name) {
    TARN_CHECK(v > 0, prefix, name, ": must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(d_model, "d_model");
  TARN_CHECK(encoder_layers >= 0, prefix, "encoder_layers: must be >= 0, got ", encoder_layers);
  TARN_CHECK(decoder_layers >= 0, prefix, "decoder_layers: must be >= 0, got ", decoder_layers);
  positive(encoder_attention_heads, "encoder_attention_heads");
  positive(decoder_attention_heads, "decoder_attention_heads");
  positive(encoder_ffn_dim, "encoder_ffn_dim");
  positive(decoder_ffn_dim, "decoder_ffn_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  // The types that finally hold them (framework/model_presets.h).
  auto at_most = [&](int64_t v, int64_t limit, const char* name) {
    TARN_CHECK(v <= limit, prefix, name, ": at most ", limit, ", got ", v);
  };
  at_most(vocab_size, kMaxVocabSize, "vocab_size");
  at_most(d_model, kMaxModelDim, "d_model");
  at_most(encoder_ffn_dim, kMaxModelDim, "encoder_ffn_dim");
  at_most(decoder_ffn_dim, kMaxModelDim, "decoder_ffn_dim");
  at_most(max_position_embeddings, kMaxPositions, "max_position_embeddings");
  TARN_CHECK(d_model % encoder_attention_heads == 0, prefix, "d_model: ", d_model,
             " is not divisible by encoder_attention_heads = ", encoder_attention_heads);
  TARN_CHECK(d_model % decoder_attention_heads == 0, prefix, "d_model: ", d_model,
             " is not divisible by decoder_attention_heads = ", decoder_attention_heads);
  check_probability(dropout, prefix + "dropout");
  check_probability(attention_dropout, prefix + "attention_dropout");
  check_probability(activation_dropout, prefix + "activation_dropout");
  TARN_CHECK(init_std > 0, prefix, "init_std: must be positive, got ", init_std);
  TARN_CHECK(layer_norm_eps > 0, prefix, "layer_norm_eps: must be positive, got ", layer_norm_eps);
  auto id = [&](int32_t v, const char* name) {
    TARN_CHECK(v >= 0 && v < vocab_size, prefix, name, ": ", v, " is outside the vocabulary [0, ", vocab_size, ")");
  };
  id(bos_token_id, "bos_token_id");
  id(pad_token_id, "pad_token_id");
  id(eos_token_id, "eos_token_id");
  id(decoder_start_token_id, "decoder_start_token_id");
  // Each stack as the recipe checks it: alignment's rules for the stack's setting, every rule for
  // the setting of each layer (the stack's, or each per-layer entry).
  auto stack = [&](const AttentionConfig& all, const std::vector<AttentionConfig>& per_layer, int64_t layers,
                   AttentionUse use, const char* name, const char* layers_name) {
    validate_attention(all, use, per_layer.empty(), prefix + name);
    TARN_CHECK(per_layer.empty() || static_cast<int64_t>(per_layer.size()) == layers, prefix, layers_name, ": ",
               per_layer.size(), " entries for ", layers, " layers");
    for (size_t i = 0; i < per_layer.size(); ++i)
      validate_attention(per_layer[i], use, true, str_cat(prefix, layers_name, "[", i, "]"));
  };
  stack(encoder_self_attention, encoder_self_layers, encoder_layers, {false, false}, "encoder_self_attention",
        "encoder_self_layers");
  stack(decoder_self_attention, decoder_self_layers, decoder_layers, {false, true}, "decoder_self_attention",
        "decoder_self_layers");
  stack(cross_attention, cross_layers, decoder_layers, {true, false}, "cross_attention", "cross_layers");
}

std::string BartConfig::str() const {
  std::ostringstream os;
  os << "bart(vocab " << vocab_size << ", d " << d_model << ", layers " << encoder_layers << "+" << decoder_layers
     << ", heads " << encoder_attention_heads << "/" << decoder_attention_heads << ", ffn " << encoder_ffn_dim << "/"
     << decoder_ffn_dim << ", max_pos " << max_position_embeddings << ", dropout " << dropout << "/"
     << attention_dropout << "/" << activation_dropout << ", attention enc "
     << layers_str(encoder_self_layers, encoder_self_attention) << " dec "
     << layers_str(decoder_self_layers, decoder_self_attention) << " cross " << layers_str(cross_layers, cross_attention)
     << ")";
  return os.str();
}

// Matches the modules' registration (layers/bart.cpp, layers/attention.cpp, layers/attention/,
// layers/delta_rule_block.cpp): token embedding V x d (the output layer shares it), learned
// positions (max_positions + 2) x d per stack (HuggingFace's offset of 2), a LayerNorm on each
// stack's embeddings; per layer, attention projections 4 (d^2 + d) per attention, 2d per
// LayerNorm, and the feed-forward d f + f + f d + d; on top, each attention's own parameters and
// buffers, layer by layer as resolved (per-layer lists included), as its kind counts them
// (layers/attention/registry.h: AttentionKindEntry::parameters and buffer_values).
// Every size is a double: a schema-maximal value (conv_size 2^63 - 1) cannot wrap.
double BartConfig::attention_parameters(const AttentionConfig& a, double d_model, double heads, bool cross) {
  return ::tarn::attention_parameters(a, AttentionSizes{d_model, heads, cross});
}

double BartConfig::attention_buffer_values(const AttentionConfig& a, double d_model, double heads) {
  return ::tarn::attention_buffer_values(a, AttentionSizes{d_model, heads, false});
}

void BartConfig::for_each_attention(
    const std::function<void(Stack stack, int64_t layer, const AttentionConfig& a, double count)>& f) const {
  auto stack = [&](Stack s, const std::vector<AttentionConfig>& per_layer, const AttentionConfig& all, int64_t layers) {
    if (per_layer.empty()) {
      f(s, -1, all, static_cast<double>(layers));  // every layer alike: once, counted `layers` times
      return;
    }
    for (size_t l = 0; l < per_layer.size(); ++l) f(s, static_cast<int64_t>(l), per_layer[l], 1.0);
  };
  stack(Stack::encoder_self, encoder_self_layers, encoder_self_attention, encoder_layers);
  stack(Stack::decoder_self, decoder_self_layers, decoder_self_attention, decoder_layers);
  stack(Stack::cross, cross_layers, cross_attention, decoder_layers);
}

BartConfig::Footprint BartConfig::footprint() const {
  const double d = static_cast<double>(d_model);
  const double attention = 4 * (d * d + d), norm = 2 * d;
  const double enc_ffn = 2 * d * static_cast<double>(encoder_ffn_dim) + static_cast<double>(encoder_ffn_dim) + d;
  const double dec_ffn = 2 * d * static_cast<double>(decoder_ffn_dim) + static_cast<double>(decoder_ffn_dim) + d;
  Footprint f;
  f.embedding_parameters = static_cast<double>(vocab_size) * d +
                           2 * (static_cast<double>(max_position_embeddings) + 2) * d + 2 * norm;
  f.encoder_parameters = static_cast<double>(encoder_layers) * (attention + norm + enc_ffn + norm);
  f.decoder_parameters = static_cast<double>(decoder_layers) * (2 * (attention + norm) + dec_ffn + norm);
  f.buffer_values = static_cast<double>(vocab_size);  // the output bias
  for_each_attention([&](Stack s, int64_t, const AttentionConfig& a, double count) {
    const double heads = static_cast<double>(s == Stack::encoder_self ? encoder_attention_heads : decoder_attention_heads);
    const double own = count * attention_parameters(a, d, heads, s == Stack::cross);
    (s == Stack::encoder_self ? f.encoder_parameters : f.decoder_parameters) += own;
    f.attention_parameters += own;
    f.buffer_values += count * attention_buffer_values(a, d, heads);
  });
  return f;
}

}  // namespace tarn
