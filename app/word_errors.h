#pragma once
// How far generated lines are from their references, in words: the word error rate `tarn
// denoise` reports, so that decoding settings (--beam, --no-repeat-ngram) can be compared.
#include <cstdint>
#include <string>

namespace tarn::app {

// Levenshtein distance over whitespace-separated words: the fewest word substitutions,
// insertions and deletions that turn `hypothesis` into `reference`.
int64_t word_edit_distance(const std::string& hypothesis, const std::string& reference);

// Edits and reference words summed over lines; rate() = edits / reference words (0 if none).
struct WordErrors {
  int64_t edits = 0;
  int64_t reference_words = 0;

  void add(const std::string& hypothesis, const std::string& reference);
  double rate() const;
};

}  // namespace tarn::app
