#include "app/recipe/attention_recipe.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app/recipe/first_given.h"
#include "kernels/taylor_map.h"

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
};
constexpr StackField kAttentionStacks[] = {
    {"encoder_self", &AttentionStacksRecipe::encoder_self, false, false, false,
     "encoder self-attention (bidirectional)"},
    {"decoder_self", &AttentionStacksRecipe::decoder_self, true, true, false, "decoder self-attention (causal)"},
    {"cross", &AttentionStacksRecipe::cross, true, false, true, "decoder-to-encoder attention"},
};

// Hybrid cross-attention mixes the window with linear attention only: delta and gated read the
// source through a state written once, which has no window to share the projections with.
constexpr const char* kCrossHybridGlobal =
    "hybrid cross-attention takes global: linear (a feature map); delta and gated are self-attention only "
    "under hybrid (use kind: delta or gated on their own in cross-attention)";

// Aligned decay pairs a target position with the source position of the same index: there is
// no second sequence to align with in self-attention (kind gated decays there).
constexpr const char* kSelfAlignDecay =
    "cross-attention only: it weighs source position j by its distance from target position i (for a decay in "
    "self-attention, use kind: gated or delta)";

constexpr const char* kAlignGateNeedsDecay = "needs align_decay > 0 (the decayed read it gates)";

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

// Reports an issue of one setting's key (relative to the setting: "align_decay").
using Report = std::function<void(const std::string& key, const std::string& message)>;

// The rules between one setting's keys (each key's own range is the schema's). Alignment: a
// stack's own settings always (also beside `layers`, as its entries' defaults) and each entry.
void check_alignment(const AttentionConfig& a, bool cross, const Report& error) {
  if (!cross && a.align_decay > 0) error("align_decay", kSelfAlignDecay);
  if (a.align_gate && !(a.align_decay > 0)) error("align_gate", kAlignGateNeedsDecay);
}

// The kind's combination with the stack and the kernels' limits: a stack without `layers` and
// each entry.
void check_combination(const AttentionConfig& a, bool cross, const Report& error) {
  if (cross && a.is_hybrid() && a.has_delta_block()) {
    error("global", kCrossHybridGlobal);
    return;
  }
  if (!a.uses_feature_map() || a.feature_map != kernels::cpu::FeatureMap::taylor) return;
  const int64_t features = kernels::cpu::taylor_feature_count(a.taylor_dim, static_cast<int>(a.taylor_order));
  if (features > kernels::cpu::kMaxTaylorFeatures)
    error("taylor_dim", str_cat(a.taylor_dim, " at taylor_order ", a.taylor_order, " gives ", features,
                                " features, above the ", kernels::cpu::kMaxTaylorFeatures, " the kernels take"));
}

// Warnings for keys given to a stack that its kind (or, in a hybrid, its global part) ignores:
// accepted, but probably not what was meant.
void warn_ignored_keys(const std::string& prefix, const AttentionStackRecipe& a, bool cross, Loader& loader) {
  const std::string ignored = a.is_hybrid() ? str_cat("ignored: global is ", attention_kind_name(a.global))
                                            : str_cat("ignored: kind is ", attention_kind_name(a.kind));
  auto warn_if_given = [&](const char* key, const std::string& why) {
    if (loader.given(prefix + "." + key)) loader.warn(prefix + "." + key, why);
  };
  if (!a.has_delta_block()) warn_if_given("conv_size", ignored);
  if (!a.is_hybrid()) {
    for (const char* key : {"window", "global"}) warn_if_given(key, ignored);
  }
  if (a.is_hybrid() && cross && a.has_delta_block()) return;  // an error (check_combination)
  if (!a.uses_feature_map()) {
    for (const char* key :
         {"feature_map", "favor_features", "favor_redraw_every", "eps", "taylor_order", "taylor_dim", "align_decay"})
      warn_if_given(key, ignored);
    if (a.is_softmax()) warn_if_given("chunk", "ignored: kind is softmax");
    return;
  }
  if (a.is_hybrid()) warn_if_given("align_decay", "ignored: kind is hybrid (its window aligns)");
  if (a.feature_map == kernels::cpu::FeatureMap::identity) {
    loader.warn_at(first_given(loader, {prefix + ".feature_map", prefix + ".kind", prefix}), prefix + ".feature_map",
                   "identity makes linear attention a mean over positions: for ablations only");
  }
  if (a.feature_map != kernels::cpu::FeatureMap::taylor) {
    for (const char* key : {"taylor_order", "taylor_dim"}) warn_if_given(key, "ignored: feature_map is not taylor");
  }
  if (a.feature_map != kernels::cpu::FeatureMap::favor) {
    for (const char* key : {"favor_features", "favor_redraw_every"})
      warn_if_given(key, "ignored: feature_map is not favor");
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
    const Report error = [&](const std::string& key, const std::string& message) {
      loader.error_at(entry.origin, entry_key + "." + key, message);
    };
    check_combination(layer, stack.cross, error);
    check_alignment(layer, stack.cross, error);
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
    const Report error = [&](const std::string& key, const std::string& message) {
      loader.error(prefix + "." + key, message);
    };
    check_alignment(a, stack.cross, error);
    if (!a.layers.empty()) continue;  // settings beside `layers` are its entries' defaults
    check_combination(a, stack.cross, error);
    warn_ignored_keys(prefix, a, stack.cross, loader);
  }
}

}  // namespace tarn::recipe_sections
