#include "data/denoising_dataset.h"

#include <algorithm>

#include "data/corpus_reader.h"
#include "data/seed.h"
#include "data/special_ids.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace tarn {

void DenoisingOptions::validate() const {
  LengthLimits::validate();
  noise.validate();
}

DenoisingDataset::DenoisingDataset(const Ragged& lines, int32_t mask_id, const DenoisingOptions& options)
    : mask_id_(mask_id), options_(options) {
  options.validate();
  // Room for </s> (and <s>) on both sides; the text is the target, so both limits apply to it.
  const auto budget = static_cast<size_t>(std::min(options.max_source_length, options.max_target_length) - 1 -
                                          (options.bos ? 1 : 0));
  packed_ = pack_lines(lines, budget, options.pack);
  TARN_CHECK(packed_.examples() > 0, "denoising dataset: no example (all ", lines.rows(),
             " lines encoded to no token)");
  stats_.examples = static_cast<int64_t>(packed_.examples());
  stats_.lines = static_cast<int64_t>(lines.rows());
  stats_.empty_lines = packed_.empty;
  // A line cut to the shared budget is cut for whichever limit is the smaller (both if equal).
  if (options.max_source_length <= options.max_target_length) stats_.truncated_source = packed_.truncated;
  if (options.max_target_length <= options.max_source_length) stats_.truncated_target = packed_.truncated;
  stats_.target_tokens = static_cast<int64_t>(packed_.lines.total()) + stats_.examples * (options.bos ? 2 : 1);
}

DenoisingDataset DenoisingDataset::from_files(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                              const DenoisingOptions& options, ReadStats* read) {
  return DenoisingDataset(tokenizer.encode_lines(read_text_lines(paths, read)), tokenizer.mask_id(), options);
}

Example DenoisingDataset::example(size_t index, uint64_t epoch) const {
  TARN_CHECK(index < size(), "denoising dataset: example ", index, " out of range (", size(), " examples)");
  std::vector<IdSpan> sentences;
  for (size_t l = packed_.example_begin[index]; l < packed_.example_begin[index + 1]; ++l)
    sentences.push_back(packed_.lines.row(l));

  Example ex;
  if (options_.bos) ex.target.push_back(kBosId);
  for (const auto& s : sentences) ex.target.insert(ex.target.end(), s.begin(), s.end());
  ex.target.push_back(kEosId);

  Philox rng(derive_seed(options_.seed, SeedPurpose::kNoise, epoch), /*stream=*/index);
  ex.source = noise_example(sentences, options_.noise, mask_id_, rng);
  // Zero-length spans insert masks, so a full-length text can come out a few tokens longer.
  const auto max_text = static_cast<size_t>(options_.max_source_length - 1 - (options_.bos ? 1 : 0));
  if (ex.source.size() > max_text) ex.source.resize(max_text);
  if (options_.bos) ex.source.insert(ex.source.begin(), kBosId);
  ex.source.push_back(kEosId);
  return ex;
}

}  // namespace tarn
