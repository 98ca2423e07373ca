#pragma once
// The recipe's `model` section: the encoder-decoder's sizes (or a preset's), its regularisation
// and initialisation, and its attention (app/recipe/attention_recipe.h). app/session.h maps it
// onto the model's own config (BartConfig, layers/config.h).
#include <cstdint>
#include <string>

#include "app/recipe/attention_recipe.h"
#include "framework/config/schema.h"

namespace tarn {

struct ModelRecipe {
  std::string preset = "small";  // tiny | small | base | custom
  int64_t vocab_size = 0;        // 0 = the tokenizer's vocabulary size
  // Sizes: the defaults below are the `small` preset; load_recipe fills them from the preset.
  int64_t d_model = 256;
  int64_t encoder_layers = 4;
  int64_t decoder_layers = 4;
  int64_t heads = 4;  // attention heads of every stack
  int64_t ffn_dim = 1024;
  int64_t max_positions = 512;
  double dropout = 0.1;
  double attention_dropout = 0.0;
  double activation_dropout = 0.0;
  bool scale_embedding = false;
  double init_std = 0.02;
  std::string init_from;  // a checkpoint or run folder: a new run's first weights (app/init_from.h)
  AttentionStacksRecipe attention;
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
