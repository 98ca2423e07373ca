#pragma once
// A tiny generated English-like corpus and a SentencePiece model trained on it, small enough
// to train in well under a second, for the tests that need a real tokenizer.
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "framework/rng.h"
#include "test_files.h"

namespace tarn::testing {

constexpr int kTinyVocab = 120;

// `n` lines of 3..12 words drawn with Philox from a fixed word list (deterministic).
inline std::vector<std::string> tiny_corpus_lines(int n, uint64_t seed = 7) {
  static const char* kWords[] = {"the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house",
                                 "small", "green", "river", "bank", "of", "and", "quickly", "slowly",
                                 "bird", "sang", "tree", "in", "garden", "water", "light", "stone"};
  constexpr uint32_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  constexpr uint32_t kMinWords = 3, kExtraWords = 10;
  Philox rng(seed);
  std::vector<std::string> lines;
  for (int i = 0; i < n; ++i) {
    const uint32_t words = kMinWords + rng.below(kExtraWords);
    std::string line;
    for (uint32_t w = 0; w < words; ++w) line += (w ? " " : "") + std::string(kWords[rng.below(kNumWords)]);
    lines.push_back(line);
  }
  return lines;
}

// Trains a tiny model in `dir` and loads it.
inline Tokenizer train_tiny_tokenizer(const TempDir& dir) {
  const std::string corpus = dir.write_lines("corpus.txt", tiny_corpus_lines(300));
  TokenizerTrainOptions options;
  options.hard_vocab_limit = false;  // the corpus may not support exactly kTinyVocab pieces
  return Tokenizer::load(Tokenizer::train({corpus}, dir.file("tiny"), kTinyVocab, options));
}

}  // namespace tarn::testing
