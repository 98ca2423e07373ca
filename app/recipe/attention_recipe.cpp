#include "app/recipe/attention_recipe.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app/recipe/first_given.h"
#include "app/recipe/model_recipe.h"
#include "framework/attention_config_keys.h"
#include "layers/attention/settings.h"

namespace tarn::recipe_sections {
namespace {

using config::Loader;
using config::SectionBuilder;

struct StackField {
  const char* key;
  AttentionStack AttentionStacks::*member;
  std::vector<YamlEntry> AttentionLayerEntries::*entries;  // its `layers` as written
  bool decoder;  // its layer count is decoder_layers (else encoder_layers)
  bool causal, cross;
  const char* description;
  AttentionUse use() const { return {cross, causal}; }
};
constexpr StackField kAttentionStacks[] = {
    {"encoder_self", &AttentionStacks::encoder_self, &AttentionLayerEntries::encoder_self, false, false, false,
     "encoder self-attention (bidirectional)"},
    {"decoder_self", &AttentionStacks::decoder_self, &AttentionLayerEntries::decoder_self, true, true, false,
     "decoder self-attention (causal)"},
    {"cross", &AttentionStacks::cross, &AttentionLayerEntries::cross, true, false, true, "decoder-to-encoder attention"},
};

// The schema of one per-layer entry: the keys of a stack, minus `layers`.
std::unique_ptr<config::Schema> make_layer_schema(bool causal) {
  auto schema = std::make_unique<config::Schema>("attention layer");
  declare_attention_setting(schema->root<AttentionConfig>(), causal);
  return schema;
}
const config::Schema& layer_schema(bool causal) {
  static const std::unique_ptr<config::Schema> plain = make_layer_schema(false), causal_stack = make_layer_schema(true);
  return causal ? *causal_stack : *plain;
}

// Warnings for keys given to a stack that its kind (or, in a hybrid, its global part) ignores:
// accepted, but probably not what was meant. The kind says which it reads.
void warn_ignored_keys(const std::string& prefix, const AttentionConfig& a, AttentionUse use, Loader& loader) {
  for (const std::string& key : attention_setting_keys()) {
    if (!loader.given(prefix + "." + key)) continue;
    if (const std::string why = ignored_attention_key(a, use, key); !why.empty()) loader.warn(prefix + "." + key, why);
  }
}

// One entry of a stack's `layers` parsed over the stack's settings (so that keys given beside
// `layers`, in the file or by --set, apply to every entry that does not set them itself).
AttentionConfig resolve_entry(const StackField& stack, const AttentionStack& a, const YamlEntry& entry,
                              const std::string& entry_key, Loader& loader) {
  AttentionConfig layer = static_cast<const AttentionConfig&>(a);  // the stack's settings; the entry's keys replace them
  Loader sub(layer_schema(stack.causal), &layer);
  const bool name_only = entry.text.empty() || entry.text[0] != '{';
  sub.apply_text(name_only ? "{kind: " + entry.text + "}" : entry.text, entry.origin.source);
  for (const ConfigIssue& issue : sub.errors())
    loader.error_at(entry.origin, issue.key.empty() ? entry_key : entry_key + "." + issue.key, issue.message);
  if (sub.ok()) {
    SettingReport report;
    report.error = [&](const std::string& key, const std::string& message) {
      loader.error_at(entry.origin, entry_key + "." + key, message);
    };
    report.warn = [](const std::string&, const std::string&) {};  // a stack's warnings are enough
    check_attention_kind(layer, stack.use(), report);
    check_attention_alignment(layer, stack.use(), report);
  }
  return layer;
}

}  // namespace

void declare_attention(SectionBuilder<ModelRecipe> model) {
  auto attention = model.section<AttentionStacks>(&ModelRecipe::attention, "attention",
                                                  "attention per stack (docs/design.md section 2)");
  for (const StackField& stack : kAttentionStacks) {
    auto section = attention.section(stack.member, stack.key, stack.description);
    declare_attention_setting(section, stack.causal);
    section.entries(model, &ModelRecipe::attention_layers, stack.entries, "layers",
                    "attention per layer, one entry per layer of the stack: a kind name or a map of this section's "
                    "keys, over the settings given beside `layers` (e.g. [linear, linear, linear, {kind: hybrid, "
                    "window: 128}]); [] = every layer as above");
  }
}

// Each entry's issues are reported at the entry, under model.attention.STACK.layers[i].
void resolve_attention_layers(ModelRecipe& model, Loader& loader) {
  for (const StackField& stack : kAttentionStacks) {
    AttentionStack& a = model.attention.*stack.member;
    const std::vector<YamlEntry>& entries = model.attention_layers.*stack.entries;
    a.per_layer.clear();
    if (entries.empty()) continue;
    const std::string key = std::string("model.attention.") + stack.key + ".layers";
    const int64_t layers = stack.decoder ? model.decoder_layers : model.encoder_layers;
    if (static_cast<int64_t>(entries.size()) != layers) {
      loader.error(key, str_cat("expected one entry per layer: ", layers, " (model.",
                                stack.decoder ? "decoder_layers" : "encoder_layers", "), got ", entries.size()));
      continue;
    }
    for (size_t i = 0; i < entries.size(); ++i)
      a.per_layer.push_back(resolve_entry(stack, a, entries[i], str_cat(key, "[", i, "]"), loader));
  }
}

void check_attention(const ModelRecipe& model, Loader& loader) {
  for (const StackField& stack : kAttentionStacks) {
    const std::string prefix = std::string("model.attention.") + stack.key;
    const AttentionStack& a = model.attention.*stack.member;
    SettingReport report;
    report.error = [&](const std::string& key, const std::string& message) { loader.error(prefix + "." + key, message); };
    // A warning about a key the stack may not give itself (the identity map is the default's
    // kind's): at the key, else at the kind, else at the stack.
    report.warn = [&](const std::string& key, const std::string& message) {
      loader.warn_at(first_given(loader, {prefix + "." + key, prefix + ".kind", prefix}), prefix + "." + key, message);
    };
    check_attention_alignment(a, stack.use(), report);
    if (!(model.attention_layers.*stack.entries).empty()) continue;  // settings beside `layers` are its entries' defaults
    check_attention_kind(a, stack.use(), report);
    warn_ignored_keys(prefix, a, stack.use(), loader);
  }
}

}  // namespace tarn::recipe_sections
