#include "data/pair_dataset.h"

#include "data/special_ids.h"
#include "data/tokenizer.h"
#include "kernels/check.h"

namespace tarn {
namespace {

// Appends [<s>] `ids` cut to max_length - 1 (- 1 for <s>) tokens, then </s>. Returns whether it
// was cut.
bool push_with_eos(Ragged& out, IdSpan ids, int64_t max_length, bool bos, std::vector<int32_t>& scratch) {
  const auto limit = static_cast<size_t>(max_length - 1 - (bos ? 1 : 0));
  const bool cut = ids.size() > limit;
  scratch.clear();
  if (bos) scratch.push_back(kBosId);
  scratch.insert(scratch.end(), ids.begin(), cut ? ids.begin() + limit : ids.end());
  scratch.push_back(kEosId);
  out.push_back(scratch);
  return cut;
}

}  // namespace

PairDataset::PairDataset(const Ragged& sources, const Ragged& targets, const PairOptions& options) {
  options.validate();
  TARN_CHECK(sources.rows() == targets.rows(), "pair dataset: ", sources.rows(), " sources but ", targets.rows(),
             " targets");
  const size_t marks = options.bos ? 2 : 1;  // [<s>] and </s>
  sources_.reserve(sources.rows(), sources.total() + marks * sources.rows());
  targets_.reserve(targets.rows(), targets.total() + marks * targets.rows());
  std::vector<int32_t> scratch;
  for (size_t i = 0; i < sources.rows(); ++i) {
    if (sources.row_size(i) == 0 || targets.row_size(i) == 0) {
      ++stats_.empty_lines;  // a side that encodes to nothing cannot be learned from
      continue;
    }
    stats_.truncated_source += push_with_eos(sources_, sources.row(i), options.max_source_length, options.bos, scratch);
    stats_.truncated_target += push_with_eos(targets_, targets.row(i), options.max_target_length, options.bos, scratch);
  }
  TARN_CHECK(sources_.rows() > 0, "pair dataset: no example (all ", sources.rows(), " pairs have an empty side)");
  stats_.lines = static_cast<int64_t>(sources.rows());
  stats_.examples = static_cast<int64_t>(sources_.rows());
  stats_.target_tokens = static_cast<int64_t>(targets_.total());
}

PairDataset PairDataset::from_files(const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                                    const PairOptions& options, ReadStats* read) {
  const auto pairs = read_tsv_pairs(paths, read);
  std::vector<std::string> sources, targets;
  sources.reserve(pairs.size());
  targets.reserve(pairs.size());
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    targets.push_back(p.target);
  }
  return PairDataset(tokenizer.encode_lines(sources), tokenizer.encode_lines(targets), options);
}

Example PairDataset::example(size_t index, uint64_t /*epoch*/) const {
  TARN_CHECK(index < size(), "pair dataset: example ", index, " out of range (", size(), " examples)");
  return {sources_.row(index).to_vector(), targets_.row(index).to_vector()};
}

}  // namespace tarn
