#pragma once
// Supervised seq2seq examples from "source<TAB>target" lines: source ids + </s>, target ids
// + </s>, each cut to its length limit (counted in stats()); with `bos`, each side starts with
// <s> (HF BART's tokenizer: <s> ... </s>). Identical in every epoch.
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/dataset.h"
#include "data/length_limits.h"
#include "data/ragged.h"

namespace tarn {

class Tokenizer;

struct PairOptions : LengthLimits {};

class PairDataset : public Dataset {
 public:
  // Row i of `sources` and of `targets` (token ids without </s>) form example i.
  PairDataset(const Ragged& sources, const Ragged& targets, const PairOptions& options);

  static PairDataset from_files(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                const PairOptions& options, ReadStats* read = nullptr);

  size_t size() const override { return sources_.rows(); }
  Example example(size_t index, uint64_t epoch) const override;

 private:
  Ragged sources_, targets_;  // </s> already appended
};

}  // namespace tarn
