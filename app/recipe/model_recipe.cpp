#include "app/recipe/model_recipe.h"

#include "app/recipe/first_given.h"
#include "framework/model_presets.h"
#include "layers/config_keys.h"

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
  declare_model_sizes(model, "from model.preset");  // layers/config_keys.h
}

void declare_regularisation_and_init(SectionBuilder<ModelRecipe> model) {
  declare_model_regularisation(model);
  model.string(&ModelRecipe::init_from, "init_from",
               "a checkpoint or run folder (e.g. one tarn import wrote) whose tensors of the same name and shape a "
               "new run starts from; the tensors this model adds (a new attention's) keep their initialisation; "
               "a shape that differs is an error; \"\" = initialise everything; ignored when resuming");
  declare_model_init(model);
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
  SettingReport report;
  report.error = [&](const std::string& key, const std::string& message) {
    loader.error_at(first_given(loader, {"model." + key, "model.d_model", "model.preset"}), "model." + key, message);
  };
  report.warn = [&](const std::string& key, const std::string& message) { loader.warn("model." + key, message); };
  check_model_size_rules(m, report);
}

}  // namespace recipe_sections
}  // namespace tarn
