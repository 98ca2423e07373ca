#include "app/recipe/data_recipe.h"

#include <algorithm>

#include "app/recipe/recipe.h"
#include "framework/model_presets.h"

namespace tarn::recipe_sections {
namespace {

using config::Loader;
using config::SectionBuilder;

constexpr int64_t kMinTokenizerVocab = 8;  // 4 specials + <mask> + a few pieces

void declare_tokenizer(SectionBuilder<TokenizerRecipe> tokenizer) {
  tokenizer
      .string(&TokenizerRecipe::model, "model",
              "an existing SentencePiece .model, or a byte-level BPE tokenizer.json (HuggingFace's; a checkpoint's "
              "tokenizer.model may hold either); \"\" = train a SentencePiece model (see train)")
      .check(
          [](const std::string& s) {
            auto ends = [&](const std::string& e) { return s.size() > e.size() && s.substr(s.size() - e.size()) == e; };
            return s.empty() || ends(".model") || ends(".json");
          },
          "a path ending in .model or .json, or \"\"");
}

void declare_tokenizer_training(SectionBuilder<TokenizerTrainRecipe> train) {
  train.integer(&TokenizerTrainRecipe::vocab_size, "vocab_size", "pieces, specials and <mask> included")
      .min(kMinTokenizerVocab)
      .max(static_cast<double>(kMaxVocabSize));  // SentencePiece's vocab_size is an int32
  train.integer(&TokenizerTrainRecipe::input_sentence_size, "input_sentence_size",
                "lines sampled to train on; 0 = every line")
      .non_negative();
  train.number(&TokenizerTrainRecipe::character_coverage, "character_coverage",
               "fraction of characters covered (1.0 for English)")
      .above(0)
      .max(1);
  train.string(&TokenizerTrainRecipe::model_prefix, "model_prefix",
               "writes <prefix>.model and .vocab; \"\" = <folder of data.train>/spm<vocab_size>");
  train.choice(&TokenizerTrainRecipe::model_type, "model_type", "SentencePiece model type",
               {"unigram", "bpe", "char", "word"});
  train.boolean(&TokenizerTrainRecipe::hard_vocab_limit, "hard_vocab_limit",
                "false: vocab_size is only an upper bound (tiny corpora)");
}

void declare_noising(SectionBuilder<NoisingRecipe> noising) {
  noising.number(&NoisingRecipe::mask_ratio, "mask_ratio", "fraction of tokens masked by text infilling").fraction();
  noising.number(&NoisingRecipe::poisson_lambda, "poisson_lambda", "mean span length of text infilling")
      .above(0)
      .max(50);
  noising.boolean(&NoisingRecipe::permute_sentences, "permute_sentences", "shuffle the lines of a packed example");
  noising.number(&NoisingRecipe::delete_ratio, "delete_ratio", "probability of deleting each unmasked token")
      .fraction();
}

void check_lengths(const Recipe& r, Loader& loader) {
  const ModelRecipe& m = r.model;
  const DataRecipe& d = r.data;
  if (d.max_source_len > m.max_position_embeddings) {
    loader.error("data.max_source_len", str_cat("expected at most model.max_positions = ", m.max_position_embeddings, ", got ",
                                                d.max_source_len));
  }
  if (d.max_target_len > m.max_position_embeddings) {
    loader.error("data.max_target_len", str_cat("expected at most model.max_positions = ", m.max_position_embeddings, ", got ",
                                                d.max_target_len));
  }
  if (d.pack_tokens > d.max_source_len) {
    loader.error("data.pack_tokens", str_cat("expected at most data.max_source_len = ", d.max_source_len,
                                             " (0 = no packing), got ", d.pack_tokens));
  }
  const int64_t longest = std::max(d.max_source_len, d.max_target_len);
  if (r.training.tokens_per_batch < longest) {
    loader.error("training.tokens_per_batch",
                 str_cat("expected at least the longest example, max(data.max_source_len, data.max_target_len) = ",
                         longest, ", got ", r.training.tokens_per_batch));
  }
}

// Either an existing tokenizer or settings to train one. A model given with --set wins over
// train settings from the file (reusing a tokenizer with a recipe that trains one).
void check_tokenizer(const Recipe& r, Loader& loader) {
  const TokenizerRecipe& tok = r.data.tokenizer;
  if (!tok.model.empty()) {
    bool train_from_file = false, train_from_override = false;
    ConfigOrigin train_at;
    for (const auto& [key, at] : loader.origins()) {
      if (key.rfind("data.tokenizer.train", 0) != 0) continue;
      (at.is_override() ? train_from_override : train_from_file) = true;
      if (train_at.source.empty()) train_at = at;
    }
    if (train_from_override || (train_from_file && !loader.origin("data.tokenizer.model").is_override())) {
      loader.error_at(train_at, "data.tokenizer",
                      "expected either model (an existing tokenizer) or train (settings to train one), got both");
    } else if (train_from_file) {
      loader.warn_at(train_at, "data.tokenizer.train", "ignored: data.tokenizer.model is set with --set");
    }
  }
  if (tok.model.empty() && r.model.vocab_size != 0 && r.model.vocab_size < tok.train.vocab_size) {
    loader.error("model.vocab_size", str_cat("expected 0 (the tokenizer's) or at least data.tokenizer.train.vocab_size = ",
                                             tok.train.vocab_size, ", got ", r.model.vocab_size));
  }
}

}  // namespace

void declare_data(SectionBuilder<DataRecipe> data) {
  data.choice(&DataRecipe::kind, "kind", "denoising: BART pre-training on plain text; pairs: source<TAB>target lines",
              {"denoising", "pairs"});
  data.string(&DataRecipe::train, "train", "training corpus, one example per line").required();
  data.string(&DataRecipe::valid, "valid", "validation corpus; \"\" = no validation");
  data.string(&DataRecipe::test, "test", "test corpus (tarn eval); \"\" = none");
  auto tokenizer = data.section(&DataRecipe::tokenizer, "tokenizer", "SentencePiece: give either model or train");
  declare_tokenizer(tokenizer);
  declare_tokenizer_training(
      tokenizer.section(&TokenizerRecipe::train, "train", "how to train the tokenizer on data.train"));
  data.integer(&DataRecipe::max_source_len, "max_source_len", "longest source in tokens (</s> included)").min(2);
  data.integer(&DataRecipe::max_target_len, "max_target_len", "longest target in tokens (</s> included)").min(2);
  data.integer(&DataRecipe::pack_tokens, "pack_tokens",
               "denoising: join consecutive lines up to this many tokens; 0 = one line per example")
      .non_negative();
  data.boolean(&DataRecipe::bos, "bos",
               "start source and target with <s>, as HuggingFace's BART tokenizer does (decoder input </s> <s> ...); "
               "generation then forces <s> first and </s> at --max-length, as BART's forced_bos/eos_token_id. "
               "tarn import sets it");
  declare_noising(data.section(&DataRecipe::noising, "noising", "BART noise for denoising (Lewis et al. 2020, 2.2)"));
}

void check_data(const Recipe& r, Loader& loader) {
  check_lengths(r, loader);
  check_tokenizer(r, loader);
}

void warn_unused_data(const DataRecipe& d, Loader& loader) {
  if (d.kind == "pairs") {
    if (loader.given("data.noising")) loader.warn("data.noising", "ignored: data.kind is pairs");
    if (d.pack_tokens > 0) loader.warn("data.pack_tokens", "ignored: data.kind is pairs");
  }
}

}  // namespace tarn::recipe_sections
