#pragma once
// BART pre-training examples from plain text: target = text + </s>, source = noise(text) +
// </s> (data/noising.h). The noise of example i in epoch e comes from a Philox stream keyed
// by (seed, e, i), so it is new every epoch, independent of batch order and resumable.
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/length_limits.h"
#include "data/line_reader.h"
#include "data/noising.h"
#include "data/packing.h"

namespace tarn {

class Tokenizer;

struct DenoisingOptions : LengthLimits {
  bool pack = false;  // join consecutive lines up to the length limit
  NoiseConfig noise;
  uint64_t seed = 0;

  void validate() const;  // the limits, then the noise: throws tarn::Error naming the field
};

class DenoisingDataset : public Dataset {
 public:
  // `lines`: token ids of the corpus lines, without </s>. Text longer than
  // min(max_source_length, max_target_length) - 1 tokens is truncated and counted.
  DenoisingDataset(const Ragged& lines, int32_t mask_id, const DenoisingOptions& options);

  // Reads, tokenises and builds in one go; `read` receives the corpus read counts.
  static DenoisingDataset from_files(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                     const DenoisingOptions& options, ReadStats* read = nullptr);

  size_t size() const override { return packed_.examples(); }
  Example example(size_t index, uint64_t epoch) const override;

 private:
  PackedLines packed_;
  int32_t mask_id_;
  DenoisingOptions options_;
};

}  // namespace tarn
