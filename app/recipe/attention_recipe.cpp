#include "app/recipe/attention_recipe.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app/recipe/first_given.h"
#include "layers/attention/settings.h"

namespace tarn::recipe_sections {
namespace {

using config::Loader;
using config::SectionBuilder;

struct StackField {
  const char* key;
  AttentionStackRecipe AttentionStacksRecipe::*member;
  bool decoder;  // its layer count is decoder_layers (else encoder_layers)
  bool causal, cross;
  const char* description;
  AttentionUse use() const { return {cross, causal}; }
};
constexpr StackField kAttentionStacks[] = {
    {"encoder_self", &AttentionStacksRecipe::encoder_self, false, false, false,
     "encoder self-attention (bidirectional)"},
    {"decoder_self", &AttentionStacksRecipe::decoder_self, true, true, false, "decoder self-attention (causal)"},
    {"cross", &AttentionStacksRecipe::cross, true, false, true, "decoder-to-encoder attention"},
};

// The keys of a stack (S = AttentionStackRecipe) or of one per-layer entry (S = AttentionConfig),
// in four groups, in schema order (the order of to_yaml, help and resume reports).
template <class S>
void declare_kind_and_feature_map(SectionBuilder<S> a, bool causal) {
  // The built-in kinds, then those the program registered (layers/attention/registry.h).
  std::vector<std::pair<std::string, AttentionKind>> kinds;
  for (const AttentionKind& k : AttentionKind::all()) kinds.emplace_back(k.name(), k);
  a.template enumeration<AttentionKind>(&AttentionConfig::kind, "kind",
                "softmax (exact, O(N^2) in length), linear (feature maps, O(N)), delta (the gated delta rule, "
                "O(N)), gated (delta without the erase: decayed linear attention, O(N)) or hybrid (softmax over a "
                "sliding window plus linear attention, mixed by a learned gate, O(N window); in cross-attention the "
                "window is around the target position, over linear attention only), or a kind the program "
                "registered",
                kinds);
  if (causal) {
    a.fixed("causal", "the decoder never attends to later positions", "true",
            "decoder self-attention is always causal");
  }
  using kernels::cpu::FeatureMap;
  std::vector<std::pair<std::string, FeatureMap>> maps;
  for (FeatureMap m : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::favor, FeatureMap::taylor,
                       FeatureMap::hedgehog, FeatureMap::identity})
    maps.emplace_back(kernels::cpu::feature_map_name(m), m);
  a.template enumeration<FeatureMap>(&AttentionConfig::feature_map, "feature_map",
                "linear attention's (and hybrid's global part's) feature map phi (taylor: Based's Taylor map of exp(q.k) to order "
                "taylor_order on a learned taylor_dim-wide projection of each head; hedgehog: [softmax(W x), softmax(-W x)] with a learned "
                "dh x dh W per head, 2 dh features; identity: ablations only, warns)",
                maps);
}

template <class S>
void declare_kind_settings(SectionBuilder<S> a) {
  a.integer(&AttentionConfig::chunk, "chunk",
            "rows per chunk of the causal linear scan on the CPU (causal stacks only); the CUDA kernels use 32 "
            "(f32) and 64 (bf16), and a run on CUDA refuses any other value given here. delta: tokens between "
            "the states its backward keeps; aligned cross-attention (align_decay): positions per chunk of its "
            "decay-masked products")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxChunk));
  a.integer(&AttentionConfig::conv_size, "conv_size",
            "delta and gated: taps of the short causal depthwise convolution on q, k and v (1 = none)")
      .min(1);
  a.integer(&AttentionConfig::window, "window",
            "hybrid: keys the softmax part sees (causal: the last `window`; bidirectional: within window / 2 either "
            "side; cross-attention: the source positions within window / 2 of the target position)")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxWindow));
  a.template enumeration<AttentionKind>(&AttentionConfig::global, "global",
                "hybrid: the global part over the whole sequence: linear (feature_map on the layer's q and k), delta "
                "or gated (that layer on the same projections, with its convolutions, gates and output norm; "
                "self-attention only)",
                {{"linear", AttentionKind::linear}, {"delta", AttentionKind::delta}, {"gated", AttentionKind::gated}});
}

template <class S>
void declare_feature_map_settings(SectionBuilder<S> a) {
  a.integer(&AttentionConfig::favor_features, "favor_features", "FAVOR+ random features m; 0 = the head dimension")
      .non_negative()
      .max(static_cast<double>(AttentionConfig::kMaxFavorFeatures));
  a.integer(&AttentionConfig::favor_redraw_every, "favor_redraw_every",
            "redraw the FAVOR+ projection every this many steps; 0 = never")
      .non_negative();
  a.number(&AttentionConfig::eps, "eps", "linear attention's normaliser epsilon: num / (den + eps)").positive();
  a.integer(&AttentionConfig::taylor_order, "taylor_order",
            "taylor: the order P of exp's series, sum_{n <= P} x^n / n! (2: Based's map; 4: sharper; an even order "
            "keeps the kernel positive)")
      .check([](const int64_t& v) { return v == 2 || v == 4; }, "2 or 4");
  a.integer(&AttentionConfig::taylor_dim, "taylor_dim",
            "taylor: r, the width of the learned per-head projection the map takes; C(r + P, P) features (r = 16: "
            "153 at order 2, 4,845 at order 4; r = 8, order 4: 495)")
      .min(1)
      .max(255);
}

template <class S>
void declare_alignment(SectionBuilder<S> a) {
  a.number(&AttentionConfig::align_decay, "align_decay",
           "linear cross-attention: target position i weighs source position j by gamma_h^|i - j|; head 0 reads the "
           "whole source (gamma 1), head h >= 1 decays by align_decay^(2^(h - 1)) a position (0.9: 0.9, 0.81, 0.66); "
           "0 = off. A linear-time prior that target and source align near the diagonal (denoising)")
      .min(0)
      .below(1);
  a.boolean(&AttentionConfig::align_gate, "align_gate",
            "linear cross-attention with align_decay: per head and target position a learned gate mixes the "
            "decayed read with the plain read of the whole source, g aligned + (1 - g) plain, so that a head can "
            "drop the diagonal prior where target and source do not align by position (reorderings, offsets)");
}

template <class S>
void declare_setting(SectionBuilder<S> a, bool causal) {
  declare_kind_and_feature_map(a, causal);
  declare_kind_settings(a);
  declare_feature_map_settings(a);
  declare_alignment(a);
}

// The schema of one per-layer entry: the keys of a stack, minus `layers`.
std::unique_ptr<config::Schema> make_layer_schema(bool causal) {
  auto schema = std::make_unique<config::Schema>("attention layer");
  declare_setting(schema->root<AttentionConfig>(), causal);
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
AttentionConfig resolve_entry(const StackField& stack, const AttentionStackRecipe& a, const YamlEntry& entry,
                              const std::string& entry_key, Loader& loader) {
  AttentionConfig layer = a;  // the stack's settings; the entry's keys replace them
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

void declare_attention(SectionBuilder<AttentionStacksRecipe> attention) {
  for (const StackField& stack : kAttentionStacks) {
    auto section = attention.section(stack.member, stack.key, stack.description);
    declare_setting(section, stack.causal);
    section.entries(&AttentionStackRecipe::layers, "layers",
                    "attention per layer, one entry per layer of the stack: a kind name or a map of this section's "
                    "keys, over the settings given beside `layers` (e.g. [linear, linear, linear, {kind: hybrid, "
                    "window: 128}]); [] = every layer as above");
  }
}

// Each entry's issues are reported at the entry, under model.attention.STACK.layers[i].
void resolve_attention_layers(AttentionStacksRecipe& attention, int64_t encoder_layers, int64_t decoder_layers,
                              Loader& loader) {
  for (const StackField& stack : kAttentionStacks) {
    AttentionStackRecipe& a = attention.*stack.member;
    a.per_layer.clear();
    if (a.layers.empty()) continue;
    const std::string key = std::string("model.attention.") + stack.key + ".layers";
    const int64_t layers = stack.decoder ? decoder_layers : encoder_layers;
    if (static_cast<int64_t>(a.layers.size()) != layers) {
      loader.error(key, str_cat("expected one entry per layer: ", layers, " (model.",
                                stack.decoder ? "decoder_layers" : "encoder_layers", "), got ", a.layers.size()));
      continue;
    }
    for (size_t i = 0; i < a.layers.size(); ++i)
      a.per_layer.push_back(resolve_entry(stack, a, a.layers[i], str_cat(key, "[", i, "]"), loader));
  }
}

void check_attention(const AttentionStacksRecipe& attention, Loader& loader) {
  for (const StackField& stack : kAttentionStacks) {
    const std::string prefix = std::string("model.attention.") + stack.key;
    const AttentionStackRecipe& a = attention.*stack.member;
    SettingReport report;
    report.error = [&](const std::string& key, const std::string& message) { loader.error(prefix + "." + key, message); };
    // A warning about a key the stack may not give itself (the identity map is the default's
    // kind's): at the key, else at the kind, else at the stack.
    report.warn = [&](const std::string& key, const std::string& message) {
      loader.warn_at(first_given(loader, {prefix + "." + key, prefix + ".kind", prefix}), prefix + "." + key, message);
    };
    check_attention_alignment(a, stack.use(), report);
    if (!a.layers.empty()) continue;  // settings beside `layers` are its entries' defaults
    check_attention_kind(a, stack.use(), report);
    warn_ignored_keys(prefix, a, stack.use(), loader);
  }
}

}  // namespace tarn::recipe_sections
