#include "app/recipe/model_recipe.h"

#include "app/recipe/first_given.h"
#include "framework/model_presets.h"

namespace tarn {

ModelRecipe::ModelRecipe() {
  const ModelPreset& small = *find_model_preset("small");
  vocab_size = 0;
  d_model = small.d_model;
  encoder_layers = small.encoder_layers;
  decoder_layers = small.decoder_layers;
  heads = small.heads;
  ffn_dim = small.ffn_dim;
  max_position_embeddings = small.max_positions;
  attention.encoder_self = attention.decoder_self = attention.cross = AttentionConfig::linear_attention();
}

namespace recipe_sections {
namespace {

using config::Loader;
using config::SectionBuilder;

// The size fields a preset fills (framework/model_presets.h), by key.
struct SizeField {
  const char* key;
  int64_t ModelRecipe::*member;
  int64_t ModelPreset::*preset;
};
constexpr SizeField kSizeFields[] = {
    {"d_model", &ModelRecipe::d_model, &ModelPreset::d_model},
    {"encoder_layers", &ModelRecipe::encoder_layers, &ModelPreset::encoder_layers},
    {"decoder_layers", &ModelRecipe::decoder_layers, &ModelPreset::decoder_layers},
    {"heads", &ModelRecipe::heads, &ModelPreset::heads},
    {"ffn_dim", &ModelRecipe::ffn_dim, &ModelPreset::ffn_dim},
    {"max_positions", &ModelRecipe::max_position_embeddings, &ModelPreset::max_positions},
};

void declare_sizes(SectionBuilder<ModelRecipe> model) {
  model.choice(&ModelRecipe::preset, "preset",
               "sizes: tiny (d_model 64, 2+2 layers), small (256, 4+4), base (768, 6+6, BART-base), "
               "custom (give every size); sizes given below override the preset",
               {"tiny", "small", "base", "custom"});
  // Sizes are bounded by the types that finally hold them (framework/model_presets.h).
  model.integer(&ModelRecipe::vocab_size, "vocab_size", "embedding rows; 0 = the tokenizer's vocabulary size")
      .non_negative()
      .max(static_cast<double>(kMaxVocabSize));
  const std::string from_preset = "from model.preset";
  model.integer(&ModelRecipe::d_model, "d_model", "hidden size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::encoder_layers, "encoder_layers", "encoder layers").min(1).default_note(from_preset);
  model.integer(&ModelRecipe::decoder_layers, "decoder_layers", "decoder layers").min(1).default_note(from_preset);
  model.integer(&ModelRecipe::heads, "heads", "attention heads (every stack); must divide d_model")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::ffn_dim, "ffn_dim", "feed-forward inner size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::max_position_embeddings, "max_positions", "learned positions, the longest sequence")
      .min(1)
      .max(static_cast<double>(kMaxPositions))
      .default_note(from_preset);
}

void declare_regularisation_and_init(SectionBuilder<ModelRecipe> model) {
  model.number(&ModelRecipe::dropout, "dropout", "dropout on hidden states").fraction();
  model.number(&ModelRecipe::attention_dropout, "attention_dropout", "dropout on softmax attention weights")
      .fraction();
  model.number(&ModelRecipe::activation_dropout, "activation_dropout", "dropout after the feed-forward GELU")
      .fraction();
  model.boolean(&ModelRecipe::scale_embedding, "scale_embedding", "multiply token embeddings by sqrt(d_model)");
  model.string(&ModelRecipe::init_from, "init_from",
               "a checkpoint or run folder (e.g. one tarn import wrote) whose tensors of the same name and shape a "
               "new run starts from; the tensors this model adds (a new attention's) keep their initialisation; "
               "a shape that differs is an error; \"\" = initialise everything; ignored when resuming");
  model.number(&ModelRecipe::init_std, "init_std", "standard deviation of the normal weight init").positive();
}

}  // namespace

void declare_model(SectionBuilder<ModelRecipe> model) {
  declare_sizes(model);
  declare_regularisation_and_init(model);
  declare_attention(model);
}

void resolve_model(ModelRecipe& model, Loader& loader) {
  if (model.preset == "custom") {
    for (const SizeField& f : kSizeFields) {
      const std::string key = std::string("model.") + f.key;
      if (!loader.given(key)) loader.error(key, "missing required value (model.preset is custom: give every size)");
    }
  } else if (const ModelPreset* p = find_model_preset(model.preset)) {
    for (const SizeField& f : kSizeFields) {
      if (!loader.given(std::string("model.") + f.key)) model.*f.member = p->*f.preset;
    }
  }
  resolve_attention_layers(model, loader);
}

void check_model_sizes(const ModelRecipe& m, Loader& loader) {
  if (m.d_model % m.heads != 0) {
    loader.error_at(first_given(loader, {"model.heads", "model.d_model", "model.preset"}), "model.heads",
                    str_cat("expected a divisor of model.d_model = ", m.d_model, ", got ", m.heads));
  }
}

}  // namespace recipe_sections
}  // namespace tarn
