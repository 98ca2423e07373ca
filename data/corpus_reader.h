#pragma once
// The two corpus formats: plain text (one sentence or document per line, for denoising) and
// TSV pairs ("source<TAB>target" per line, for supervised seq2seq). Both follow the rules of
// data/line_reader.h: missing/empty files are errors, bad lines are counted skips.
#include <string>
#include <vector>

#include "data/line_reader.h"

namespace tarn {

struct TextPair {
  std::string source;
  std::string target;
};

// Every usable line of every file, in file order.
std::vector<std::string> read_text_lines(const std::vector<std::string>& paths, ReadStats* stats = nullptr);

// Every "source<TAB>target" line of every file, in file order. Lines without a tab, with more
// than one, or with an empty side are skipped and counted as malformed.
std::vector<TextPair> read_tsv_pairs(const std::vector<std::string>& paths, ReadStats* stats = nullptr);

}  // namespace tarn
