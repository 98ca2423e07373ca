#pragma once
// The named model sizes: one table for the recipe (model.preset, app/recipe/model_recipe.cpp)
// and the model (BartConfig::preset, layers/config.cpp). tiny: tests (seconds on a CPU); small:
// the CPU default; base: BART-base (Lewis et al. 2020: 6+6 layers, d_model 768, 12 heads, FFN
// 3072). vocab_size is the preset's own default; a recipe takes its tokenizer's.
#include <cstdint>
#include <limits>
#include <string>

namespace tarn {

struct ModelPreset {
  const char* name;
  int64_t d_model, encoder_layers, decoder_layers, heads, ffn_dim, max_positions, vocab_size;
};

inline constexpr ModelPreset kModelPresets[] = {
    {"tiny", 64, 2, 2, 4, 256, 128, 1000},
    {"small", 256, 4, 4, 4, 1024, 512, 8000},
    {"base", 768, 6, 6, 12, 3072, 1024, 50265},
};

// The largest sizes, set by the types that finally hold them (the recipe's schema refuses larger
// values naming the key; BartConfig::validate checks the same): token ids are int32, and so are
// position ids, offset by 2 (layers/embedding.h); BLAS takes int dimensions (d_model, ffn_dim,
// heads, the vocabulary of the output layer).
inline constexpr int64_t kMaxModelDim = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxVocabSize = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxPositions = std::numeric_limits<int32_t>::max() - 2;

// The preset called `name`, or nullptr.
inline const ModelPreset* find_model_preset(const std::string& name) {
  for (const ModelPreset& p : kModelPresets)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace tarn
