#include "data/batch.h"

#include <algorithm>
#include <numeric>

#include "data/special_ids.h"
#include "kernels/check.h"

namespace tarn {

int64_t Batch::src_tokens() const { return std::accumulate(src_lengths.begin(), src_lengths.end(), int64_t{0}); }
int64_t Batch::tgt_tokens() const { return std::accumulate(tgt_lengths.begin(), tgt_lengths.end(), int64_t{0}); }

Batch make_batch(const std::vector<IdSpan>& sources, const std::vector<IdSpan>& targets) {
  TARN_CHECK(!sources.empty() && sources.size() == targets.size(), "make_batch: ", sources.size(), " sources and ",
             targets.size(), " targets");
  Batch b;
  b.rows = static_cast<int64_t>(sources.size());
  for (size_t r = 0; r < sources.size(); ++r) {
    TARN_CHECK(!sources[r].empty() && !targets[r].empty(), "make_batch: row ", r, " has an empty sequence");
    b.src_len = std::max<int64_t>(b.src_len, static_cast<int64_t>(sources[r].size()));
    b.tgt_len = std::max<int64_t>(b.tgt_len, static_cast<int64_t>(targets[r].size()));
  }
  const auto S = static_cast<size_t>(b.src_len), T = static_cast<size_t>(b.tgt_len);
  const size_t B = sources.size();
  b.src_ids.assign(B * S, kPadId);
  b.src_mask.assign(B * S, 0.0f);
  b.tgt_input_ids.assign(B * T, kPadId);
  b.tgt_labels.assign(B * T, kIgnoreIndex);
  b.tgt_mask.assign(B * T, 0.0f);
  b.src_lengths.resize(B);
  b.tgt_lengths.resize(B);
  for (size_t r = 0; r < B; ++r) {
    const IdSpan src = sources[r], tgt = targets[r];
    std::copy(src.begin(), src.end(), b.src_ids.begin() + r * S);
    std::fill_n(b.src_mask.begin() + r * S, src.size(), 1.0f);
    b.src_lengths[r] = static_cast<int32_t>(src.size());

    std::copy(tgt.begin(), tgt.end(), b.tgt_labels.begin() + r * T);
    b.tgt_input_ids[r * T] = kEosId;
    std::copy(tgt.begin(), tgt.end() - 1, b.tgt_input_ids.begin() + r * T + 1);
    std::fill_n(b.tgt_mask.begin() + r * T, tgt.size(), 1.0f);
    b.tgt_lengths[r] = static_cast<int32_t>(tgt.size());
  }
  return b;
}

}  // namespace tarn
