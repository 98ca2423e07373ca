#pragma once
// The keys of one attention setting (AttentionConfig), declared once with their ranges and
// descriptions: the recipe binds them for each stack and each per-layer entry
// (app/recipe/attention_recipe.cpp), and AttentionConfig::validate checks a setting built in code
// against the same ranges (config::Schema::check_values). The rules between keys are the kinds'
// (layers/attention/settings.h).
#include <string>
#include <utility>
#include <vector>

#include "framework/attention_config.h"
#include "framework/config/schema.h"

namespace tarn {

// The keys of a stack (S = AttentionStack) or of one per-layer entry (S = AttentionConfig),
// in four groups, in schema order (the order of to_yaml, help and resume reports).
template <class S>
void declare_kind_and_feature_map(config::SectionBuilder<S> a, bool causal) {
  // The built-in kinds, then those the program registered (layers/attention/registry.h).
  std::vector<std::pair<std::string, AttentionKind>> kinds;
  for (const AttentionKind& k : AttentionKind::all()) kinds.emplace_back(k.name(), k);
  a.template enumeration<AttentionKind>(&AttentionConfig::kind, "kind",
                "softmax (exact, O(N^2) in length), linear (feature maps, O(N)), delta (the gated delta rule, "
                "O(N)), gated (delta without the erase: decayed linear attention, O(N)) or hybrid (softmax over a "
                "sliding window plus linear attention, mixed by a learned gate, O(N window); in cross-attention the "
                "window is around the target position, over linear attention only), routed (cross-attention only: "
                "softmax over chunk means plus softmax over the keys of the route_top best chunks, mixed by a learned "
                "gate), or a kind the program registered",
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
void declare_kind_settings(config::SectionBuilder<S> a) {
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
  a.integer(&AttentionConfig::route_chunk, "route_chunk",
            "routed: source positions per chunk; each chunk's landmark is the mean of its keys and values")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxWindow));
  a.integer(&AttentionConfig::route_top, "route_top",
            "routed: the chunks each target position reads key by key, those whose landmarks score highest")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxWindow));
  a.integer(&AttentionConfig::route_root, "route_root",
            "routed: the most landmarks a target position scores over the whole source: the landmarks are "
            "grouped route_chunk at a time into a tree as deep as the model's longest source (max_positions) "
            "needs for at most route_root at its top, read from there down the route_top best at each level; "
            "0: one level, every chunk's landmark scored (O(N_src / route_chunk) a position)")
      .min(0)
      .max(static_cast<double>(AttentionConfig::kMaxWindow));
  a.integer(&AttentionConfig::route_beam, "route_beam",
            "routed, with a tree (route_root > 0): the landmarks a target position chooses at each level above "
            "the keys' chunks, whose children it scores next (route_beam x route_chunk a level); the keys' chunks "
            "are still the route_top best; 0: route_top")
      .min(0)
      .max(static_cast<double>(AttentionConfig::kMaxRouteBeam));
}

template <class S>
void declare_feature_map_settings(config::SectionBuilder<S> a) {
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
void declare_alignment(config::SectionBuilder<S> a) {
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
  a.number(&AttentionConfig::align_gate_bias, "align_gate_bias",
           "align_gate: the gate's bias at initialisation, so g starts near sigmoid(bias): 0 = 1/2 each; -3 = "
           "0.05, mostly the plain read (a head learns to take the diagonal prior instead of to drop it)")
      .min(-20)
      .max(20);
}

template <class S>
void declare_attention_setting(config::SectionBuilder<S> a, bool causal) {
  declare_kind_and_feature_map(a, causal);
  declare_kind_settings(a);
  declare_feature_map_settings(a);
  declare_alignment(a);
}

}  // namespace tarn
