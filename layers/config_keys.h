#pragma once
// The model's keys (BartConfig, layers/config.h), declared once with their ranges: the recipe's
// `model` section binds them (app/recipe/model_recipe.cpp), and BartConfig::validate checks a
// config built in code against the same declaration (config::Schema::check_values). The rule
// between them (heads divide d_model) is written once too, below; the attention stacks' keys
// and rules are their own (framework/attention_config_keys.h, layers/attention/settings.h).
// Kernel-free, like the recipe's loader and its fuzzer that include it.
#include <string>

#include "framework/config/schema.h"
#include "framework/model_presets.h"
#include "kernels/check.h"
#include "layers/attention/settings.h"
#include "layers/config.h"

namespace tarn {

// Sizes, each bounded by the type that finally holds it (framework/model_presets.h). A size's
// default, in the help, reads `default_note` (the recipe's "from model.preset"); vocab_size 0
// is the recipe's "the tokenizer's", which a model never has (BartConfig::validate).
template <class S>
void declare_model_sizes(config::SectionBuilder<S> model, const std::string& default_note) {
  model.integer(&BartConfig::vocab_size, "vocab_size", "embedding rows; 0 = the tokenizer's vocabulary size")
      .non_negative()
      .max(static_cast<double>(kMaxVocabSize));
  model.integer(&BartConfig::d_model, "d_model", "hidden size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(default_note);
  model.integer(&BartConfig::encoder_layers, "encoder_layers", "encoder layers").min(1).default_note(default_note);
  model.integer(&BartConfig::decoder_layers, "decoder_layers", "decoder layers").min(1).default_note(default_note);
  model.integer(&BartConfig::heads, "heads", "attention heads (every stack); must divide d_model")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(default_note);
  model.integer(&BartConfig::ffn_dim, "ffn_dim", "feed-forward inner size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(default_note);
  model.integer(&BartConfig::max_position_embeddings, "max_positions", "learned positions, the longest sequence")
      .min(1)
      .max(static_cast<double>(kMaxPositions))
      .default_note(default_note);
}

template <class S>
void declare_model_regularisation(config::SectionBuilder<S> model) {
  model.number(&BartConfig::dropout, "dropout", "dropout on hidden states").fraction();
  model.number(&BartConfig::attention_dropout, "attention_dropout", "dropout on softmax attention weights").fraction();
  model.number(&BartConfig::activation_dropout, "activation_dropout", "dropout after the feed-forward GELU")
      .fraction();
  model.boolean(&BartConfig::scale_embedding, "scale_embedding", "multiply token embeddings by sqrt(d_model)");
}

template <class S>
void declare_model_init(config::SectionBuilder<S> model) {
  model.number(&BartConfig::init_std, "init_std", "standard deviation of the normal weight init").positive();
}

// The rule between the sizes: every head gets d_model / heads dimensions.
inline void check_model_size_rules(const BartConfig& c, const SettingReport& report) {
  if (c.heads > 0 && c.d_model % c.heads != 0)
    report.error("heads", str_cat("expected a divisor of model.d_model = ", c.d_model, ", got ", c.heads));
}

}  // namespace tarn
