#pragma once
// The built-in corpus: English definitions and example sentences from WordNet 3.0 glosses
// (Debian package wordnet-base, /usr/share/wordnet/data.{noun,verb,adj,adv}). A data line
// ends with "| gloss", e.g.
//   ... | close interaction; "they kept in daily contact"; "they claimed that ..."
// which gives three corpus lines: the definition and each quoted example. Lines are
// de-duplicated (first occurrence wins, so a synset's lines stay adjacent for packing) and
// split into train/valid/test by a hash of the line, so the split is the same on every
// machine and a line never leaks between splits.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tarn {

constexpr const char* kWordNetDir = "/usr/share/wordnet";

// The definition and the example sentences of one gloss, each trimmed, in order; empty
// pieces are left out. Quotes inside a definition that follow no ';', ':' or ',' (as in
// 'the phrase "make strides"') stay in it; text after an example's closing quote (an
// attribution like "- Mark Twain") is dropped.
std::vector<std::string> split_gloss(std::string_view gloss);

// Every definition and example of the data files in `wordnet_dir`, in file order
// (noun, verb, adj, adv), de-duplicated. Throws tarn::Error naming a missing file.
struct WordNetText {
  std::vector<std::string> lines;
  int64_t glosses = 0;     // synsets read
  int64_t duplicates = 0;  // lines dropped because they appeared before
};
WordNetText read_wordnet(const std::string& wordnet_dir = kWordNetDir);

enum class Split { kTrain, kValid, kTest };
constexpr int kValidPercent = 1, kTestPercent = 1;  // the rest (98 %) is train

// The split of a line: FNV-1a 64 of its bytes modulo 100, fixed across machines and runs.
Split split_of(std::string_view line);

struct SplitStats {
  std::string path;
  int64_t lines = 0;
  double mean_chars = 0.0;
  double mean_words = 0.0;  // whitespace-separated
};
struct PreparedCorpus {
  SplitStats train, valid, test;
  int64_t glosses = 0;
  int64_t duplicates = 0;
  std::string summary() const;  // a few lines for logs
};

// Writes <out_dir>/{train,valid,test}.txt (creating out_dir), one line per sentence.
PreparedCorpus prepare_wordnet_corpus(const std::string& out_dir, const std::string& wordnet_dir = kWordNetDir);

}  // namespace tarn
