#pragma once
// The recipe's `data` section: the corpora, the tokenizer (an existing one, or settings to
// train one), the lengths, and BART's noise for denoising. app/session.h turns it into the
// tokenizer and the datasets (data/).
#include <cstdint>
#include <string>

#include "framework/config/schema.h"

namespace tarn {

struct TokenizerTrainRecipe {
  int64_t vocab_size = 8000;
  int64_t input_sentence_size = 0;  // lines sampled for training; 0 = every line
  double character_coverage = 1.0;
  std::string model_prefix;          // writes <prefix>.model / .vocab; "" is resolved at load
  std::string model_type = "unigram";  // unigram | bpe | char | word
  bool hard_vocab_limit = true;      // false: vocab_size is an upper bound (tiny corpora)
};

struct TokenizerRecipe {
  std::string model;  // an existing SentencePiece .model or byte-level BPE tokenizer.json; "" = train one
  TokenizerTrainRecipe train;
};

struct NoisingRecipe {
  double mask_ratio = 0.3;
  double poisson_lambda = 3.0;
  bool permute_sentences = true;
  double delete_ratio = 0.0;
};

struct DataRecipe {
  std::string kind = "denoising";  // denoising | pairs
  std::string train;               // required
  std::string valid;               // "" = no validation
  std::string test;                // "" = none
  TokenizerRecipe tokenizer;
  int64_t max_source_len = 128;  // tokens, </s> included
  int64_t max_target_len = 128;
  int64_t pack_tokens = 0;  // denoising: join consecutive lines up to this many tokens; 0 = no packing
  bool bos = false;  // each side starts with <s> (HF BART's tokenizer); generation forces <s> first
  NoisingRecipe noising;
};

struct Recipe;

namespace recipe_sections {

void declare_data(config::SectionBuilder<DataRecipe> data);
// The lengths against the model's positions and the batch; either a tokenizer or settings to
// train one, and a vocabulary that holds it.
void check_data(const Recipe& r, config::Loader& loader);
// Warnings for data keys that do nothing (noising and packing of pairs).
void warn_unused_data(const DataRecipe& d, config::Loader& loader);

}  // namespace recipe_sections
}  // namespace tarn
