#pragma once
// The recipe's `model` section: the model's own config (BartConfig, layers/config.h), whose
// fields its schema binds straight to their keys (d_model, heads, ffn_dim, dropout, attention,
// ...; max_positions is max_position_embeddings), so the model is built from the recipe without
// a copy. Beside them, what only a recipe says: a preset of sizes, the weights to start from,
// and each attention stack's `layers` as written (app/recipe/attention_recipe.h).
#include <cstdint>
#include <string>

#include "app/recipe/attention_recipe.h"
#include "framework/config/schema.h"
#include "layers/config.h"

namespace tarn {

struct ModelRecipe : BartConfig {
  // The `small` preset's sizes (load_recipe fills sizes not given from model.preset), the
  // tokenizer's vocabulary (vocab_size 0), and linear attention in every stack.
  ModelRecipe();
  std::string preset = "small";  // tiny | small | base | custom
  std::string init_from;         // a checkpoint or run folder: a new run's first weights (app/init_from.h)
  AttentionLayerEntries attention_layers;
};

namespace recipe_sections {

void declare_model(config::SectionBuilder<ModelRecipe> model);
// Sizes not given come from model.preset (custom: every size must be given); then each
// stack's per-layer attention is resolved.
void resolve_model(ModelRecipe& model, config::Loader& loader);
// Heads divide d_model.
void check_model_sizes(const ModelRecipe& model, config::Loader& loader);

}  // namespace recipe_sections
}  // namespace tarn
