#include "layers/config.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "framework/attention_config_keys.h"
#include "framework/model_presets.h"
#include "kernels/check.h"
#include "layers/attention/registry.h"
#include "layers/attention/settings.h"
#include "layers/config_keys.h"

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
  c.heads = p->heads;
  c.ffn_dim = p->ffn_dim;
  c.max_position_embeddings = p->max_positions;
  return c;
}

BartConfig BartConfig::tiny() { return preset("tiny"); }
BartConfig BartConfig::small() { return preset("small"); }
BartConfig BartConfig::base() { return preset("base"); }

BartConfig& BartConfig::with_attention(const AttentionConfig& a) {
  for (AttentionStack* stack : {&attention.encoder_self, &attention.decoder_self, &attention.cross}) *stack = a;
  return *this;
}

namespace {

std::string layers_str(const AttentionStack& stack) {
  if (stack.per_layer.empty()) return stack.str();
  std::string s = "[";
  for (size_t i = 0; i < stack.per_layer.size(); ++i) s += (i ? ", " : "") + stack.per_layer[i].str();
  return s + "]";
}

}  // namespace

const AttentionConfig& AttentionStack::of(int64_t layer) const {
  if (per_layer.empty()) return *this;
  TARN_ASSERT(layer >= 0 && layer < static_cast<int64_t>(per_layer.size()), "attention of layer ", layer,
              ": the stack has ", per_layer.size(), " per-layer entries");
  return per_layer[static_cast<size_t>(layer)];
}

void BartConfig::validate(const std::string& prefix) const {
  auto fail = [&](const std::string& key, const std::string& message) {
    throw Error(str_cat(prefix, key, ": ", message));
  };
  // Each key's range, as the recipe declares it (layers/config_keys.h,
  // framework/attention_config_keys.h): the schema is made anew, as the kinds a program
  // registers join the choices of `kind`.
  config::Schema schema("model");
  auto model = schema.root<BartConfig>();
  declare_model_sizes(model, "");
  declare_model_regularisation(model);
  declare_model_init(model);
  auto stacks = model.section<AttentionStacks>(&BartConfig::attention, "attention", "");
  declare_attention_setting(stacks.section(&AttentionStacks::encoder_self, "encoder_self", ""), false);
  declare_attention_setting(stacks.section(&AttentionStacks::decoder_self, "decoder_self", ""), true);
  declare_attention_setting(stacks.section(&AttentionStacks::cross, "cross", ""), false);
  schema.check_values(*this, fail);
  // The rules between keys, the recipe's (layers/config_keys.h, layers/attention/settings.h).
  SettingReport report;
  report.error = fail;
  report.warn = [](const std::string&, const std::string&) {};
  check_model_size_rules(*this, report);
  // Each stack as the recipe checks it: alignment's rules for the stack's setting, every rule for
  // the setting of each layer (the stack's, or each per-layer entry, with its ranges).
  auto stack = [&](const AttentionStack& a, int64_t layers, AttentionUse use, const std::string& name) {
    SettingReport at = report;
    at.error = [&](const std::string& key, const std::string& message) { fail(name + "." + key, message); };
    check_attention_alignment(a, use, at);
    if (a.per_layer.empty()) {
      check_attention_kind(a, use, at);
      return;
    }
    TARN_CHECK(static_cast<int64_t>(a.per_layer.size()) == layers, prefix, name, ".per_layer: ", a.per_layer.size(),
               " entries for ", layers, " layers");
    for (size_t i = 0; i < a.per_layer.size(); ++i) {
      const std::string entry = str_cat(name, ".per_layer[", i, "]");
      a.per_layer[i].validate(prefix + entry);
      at.error = [&](const std::string& key, const std::string& message) { fail(entry + "." + key, message); };
      check_attention_alignment(a.per_layer[i], use, at);
      check_attention_kind(a.per_layer[i], use, at);
    }
  };
  stack(attention.encoder_self, encoder_layers, {false, false}, "attention.encoder_self");
  stack(attention.decoder_self, decoder_layers, {false, true}, "attention.decoder_self");
  stack(attention.cross, decoder_layers, {true, false}, "attention.cross");
  // What only a model has: a vocabulary (the recipe's 0 is the tokenizer's), its norm's epsilon
  // and the special tokens.
  TARN_CHECK(vocab_size > 0, prefix, "vocab_size: must be positive, got ", vocab_size);
  TARN_CHECK(layer_norm_eps > 0, prefix, "layer_norm_eps: must be positive, got ", layer_norm_eps);
  auto id = [&](int32_t v, const char* name) {
    TARN_CHECK(v >= 0 && v < vocab_size, prefix, name, ": ", v, " is outside the vocabulary [0, ", vocab_size, ")");
  };
  id(bos_token_id, "bos_token_id");
  id(pad_token_id, "pad_token_id");
  id(eos_token_id, "eos_token_id");
  id(decoder_start_token_id, "decoder_start_token_id");
}

std::string BartConfig::str() const {
  std::ostringstream os;
  os << "bart(vocab " << vocab_size << ", d " << d_model << ", layers " << encoder_layers << "+" << decoder_layers
     << ", heads " << heads << ", ffn " << ffn_dim << ", max_pos " << max_position_embeddings << ", dropout " << dropout << "/"
     << attention_dropout << "/" << activation_dropout << ", attention enc "
     << layers_str(attention.encoder_self) << " dec " << layers_str(attention.decoder_self) << " cross "
     << layers_str(attention.cross)
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
  auto stack = [&](Stack s, const AttentionStack& a, int64_t layers) {
    if (a.per_layer.empty()) {
      f(s, -1, a, static_cast<double>(layers));  // every layer alike: once, counted `layers` times
      return;
    }
    for (size_t l = 0; l < a.per_layer.size(); ++l) f(s, static_cast<int64_t>(l), a.per_layer[l], 1.0);
  };
  stack(Stack::encoder_self, attention.encoder_self, encoder_layers);
  stack(Stack::decoder_self, attention.decoder_self, decoder_layers);
  stack(Stack::cross, attention.cross, decoder_layers);
}

BartConfig::Footprint BartConfig::footprint() const {
  const double d = static_cast<double>(d_model);
  const double attention = 4 * (d * d + d), norm = 2 * d;
  const double ffn = 2 * d * static_cast<double>(ffn_dim) + static_cast<double>(ffn_dim) + d;
  Footprint f;
  f.embedding_parameters = static_cast<double>(vocab_size) * d +
                           2 * (static_cast<double>(max_position_embeddings) + 2) * d + 2 * norm;
  f.encoder_parameters = static_cast<double>(encoder_layers) * (attention + norm + ffn + norm);
  f.decoder_parameters = static_cast<double>(decoder_layers) * (2 * (attention + norm) + ffn + norm);
  f.buffer_values = static_cast<double>(vocab_size);  // the output bias
  for_each_attention([&](Stack s, int64_t, const AttentionConfig& a, double count) {
    const double h = static_cast<double>(heads);
    const double own = count * attention_parameters(a, d, h, s == Stack::cross);
    (s == Stack::encoder_self ? f.encoder_parameters : f.decoder_parameters) += own;
    f.attention_parameters += own;
    f.buffer_values += count * attention_buffer_values(a, d, h);
  });
  return f;
}

}  // namespace tarn
