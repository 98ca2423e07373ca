#include "data/batch_plan.h"

#include <algorithm>
#include <numeric>

#include "framework/rng.h"
#include "kernels/check.h"

namespace tarn {

void BatchPlanConfig::validate() const {
  TARN_CHECK(max_tokens > 0, "batch.max_tokens: expected a positive number, got ", max_tokens);
  TARN_CHECK(max_rows >= 0, "batch.max_rows: expected 0 (no limit) or a positive number, got ", max_rows);
  TARN_CHECK(bucket_width > 0, "batch.bucket_width: expected a positive number, got ", bucket_width);
}

std::vector<std::vector<uint32_t>> plan_batches(const std::vector<int32_t>& src_lengths,
                                                const std::vector<int32_t>& tgt_lengths,
                                                const BatchPlanConfig& config, uint64_t shuffle_seed) {
  config.validate();
  TARN_CHECK(src_lengths.size() == tgt_lengths.size(), "plan_batches: ", src_lengths.size(), " source and ",
             tgt_lengths.size(), " target lengths");
  const size_t n = src_lengths.size();
  std::vector<int64_t> longer(n);
  for (size_t i = 0; i < n; ++i) {
    longer[i] = std::max(src_lengths[i], tgt_lengths[i]);
    TARN_CHECK(longer[i] <= config.max_tokens, "batching: example ", i, " has ", longer[i],
               " tokens, more than batch.max_tokens = ", config.max_tokens,
               " (raise max_tokens or lower the maximum lengths)");
  }

  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  Philox rng(shuffle_seed);
  if (config.shuffle) {
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(static_cast<uint32_t>(i))]);
  }
  // Stable: inside a bucket the shuffled (or, unshuffled, the index) order survives.
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return longer[a] / config.bucket_width < longer[b] / config.bucket_width;
  });

  std::vector<std::vector<uint32_t>> batches;
  std::vector<uint32_t> current;
  int64_t current_max = 0;
  for (uint32_t i : order) {
    const int64_t new_max = std::max(current_max, longer[i]);
    const auto rows = static_cast<int64_t>(current.size()) + 1;
    if (!current.empty() && (rows * new_max > config.max_tokens || (config.max_rows > 0 && rows > config.max_rows))) {
      batches.push_back(std::move(current));
      current.clear();
      current_max = 0;
    }
    current.push_back(i);
    current_max = std::max(current_max, longer[i]);
  }
  if (!current.empty()) batches.push_back(std::move(current));

  if (config.shuffle) {
    for (size_t i = batches.size(); i > 1; --i)
      std::swap(batches[i - 1], batches[rng.below(static_cast<uint32_t>(i))]);
  }
  return batches;
}

}  // namespace tarn
