// Fuzzes what `tarn import` reads of a HuggingFace BART folder's config files (app/hf_config.cpp,
// framework/io/json.cpp) and the recipe it makes of them (app/recipe). Each input is used twice:
//   1. as config.json, the way import_hf_bart reads it before the weights: check_hf_bart_config,
//      mask_token_id against BART's <mask> (id 4), tie_word_embeddings, then hf_bart_recipe_yaml
//      and parse_recipe. A recipe that parses must hold config.json's sizes unchanged;
//   2. as generation_config.json: check_hf_generation_config.
//
// Expected outcomes: a recipe, or tarn::Error naming the file, the field and its value. Anything
// else (a crash, a sanitizer report, another exception, a hang) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/hf_config.h"
#include "app/recipe/recipe.h"
#include "kernels/check.h"

namespace {

void import_config(const std::string& text) {
  const tarn::app::HfConfig cfg(text, "config.json");
  std::vector<std::string> not_applied;
  tarn::app::check_hf_bart_config(cfg, not_applied);
  if (const tarn::json::Json* m = cfg.find("mask_token_id"); m && !m->is_null()) cfg.id_is("mask_token_id", 4, true);
  const std::string yaml = tarn::app::hf_bart_recipe_yaml(cfg, "/nonexistent/out", "/nonexistent/out/tokenizer.json");
  const tarn::Recipe r = tarn::parse_recipe(yaml, "config.json (as a tarn recipe)");
  cfg.boolean("tie_word_embeddings", true);
  const struct {
    const char* field;
    int64_t recipe;
  } sizes[] = {{"vocab_size", r.model.vocab_size},
               {"d_model", r.model.d_model},
               {"encoder_layers", r.model.encoder_layers},
               {"decoder_layers", r.model.decoder_layers},
               {"encoder_attention_heads", r.model.heads},
               {"encoder_ffn_dim", r.model.ffn_dim},
               {"max_position_embeddings", r.model.max_position_embeddings}};
  for (const auto& s : sizes) {
    if (cfg.integer(s.field) != s.recipe) {
      std::fprintf(stderr, "config.json %s = %lld became %lld in the recipe:\n%s\n", s.field,
                   static_cast<long long>(cfg.integer(s.field)), static_cast<long long>(s.recipe), yaml.c_str());
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    import_config(input);
  } catch (const tarn::Error&) {
  }
  try {
    std::vector<std::string> not_applied;
    tarn::app::check_hf_generation_config(tarn::app::HfConfig(input, "generation_config.json"), not_applied);
  } catch (const tarn::Error&) {
  }
  return 0;
}
