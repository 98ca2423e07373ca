#pragma once
// The recipe's `model.attention` section: one stack per attention of the BART layout
// (encoder_self, decoder_self, cross), each parsed straight into the type the model and the
// kernels read (framework/attention_config.h), and optionally chosen per layer. The rules that
// tie an attention setting's keys together live here, once for a stack and its per-layer
// entries alike.
#include <cstdint>
#include <vector>

#include "framework/attention_config.h"
#include "framework/config/config_error.h"
#include "framework/config/schema.h"

namespace tarn {

// One stack's attention, optionally chosen per layer: `layers` holds one entry per layer of the
// stack as given (a kind name, or a map of settings that override the stack's), `per_layer`
// what they resolve to once every source is applied (empty without `layers`).
struct AttentionStackRecipe : AttentionConfig {
  std::vector<YamlEntry> layers;
  std::vector<AttentionConfig> per_layer;
};

// A recipe's stacks are linear attention unless it says otherwise.
struct AttentionStacksRecipe {
  AttentionStackRecipe encoder_self{AttentionConfig::linear_attention(), {}, {}};
  AttentionStackRecipe decoder_self{AttentionConfig::linear_attention(), {}, {}};  // always causal
  AttentionStackRecipe cross{AttentionConfig::linear_attention(), {}, {}};
};

namespace recipe_sections {

// Declares model.attention's stacks and their keys.
void declare_attention(config::SectionBuilder<AttentionStacksRecipe> attention);

// Parses each stack's `layers` entries over the stack's settings into `per_layer`, checking
// each entry (its issues at the entry's line, under model.attention.STACK.layers[i]).
// `encoder_layers` and `decoder_layers` are the stacks' layer counts.
void resolve_attention_layers(AttentionStacksRecipe& attention, int64_t encoder_layers, int64_t decoder_layers,
                              config::Loader& loader);

// The rules between a stack's keys, and warnings for keys its kind ignores.
void check_attention(const AttentionStacksRecipe& attention, config::Loader& loader);

}  // namespace recipe_sections
}  // namespace tarn
