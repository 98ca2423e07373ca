#pragma once
// The recipe's `model.attention` section: one stack per attention of the BART layout
// (encoder_self, decoder_self, cross), each parsed straight into the model's own stack
// (AttentionStack, layers/config.h: an AttentionConfig, framework/attention_config.h, and its
// per-layer settings), and optionally chosen per layer through `layers`, which the recipe keeps
// as written (AttentionLayerEntries) and resolves into the stack's per_layer. The rules between
// a setting's keys are its kind's (layers/attention/settings.h); they are reported here, at the
// keys' lines, for a stack and its per-layer entries alike.
#include <cstdint>
#include <vector>

#include "framework/config/config_error.h"
#include "framework/config/schema.h"

namespace tarn {

struct ModelRecipe;

// Each stack's `layers` as written: one entry per layer of the stack (a kind name, or a map of
// settings that override the stack's); empty = every layer as the stack.
struct AttentionLayerEntries {
  std::vector<YamlEntry> encoder_self, decoder_self, cross;
};

namespace recipe_sections {

// Declares model.attention's stacks and their keys (in `model`'s section).
void declare_attention(config::SectionBuilder<ModelRecipe> model);

// Parses each stack's `layers` entries over the stack's settings into its per_layer, checking
// each entry (its issues at the entry's line, under model.attention.STACK.layers[i]).
void resolve_attention_layers(ModelRecipe& model, config::Loader& loader);

// The rules between a stack's keys, and warnings for keys its kind ignores.
void check_attention(const ModelRecipe& model, config::Loader& loader);

}  // namespace recipe_sections
}  // namespace tarn
