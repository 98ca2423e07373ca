#pragma once
// One training batch as plain row-major arrays (the trainer turns them into Tensors).
// B = rows, S = longest source, T = longest target in the batch. Padding uses kPadId (1) in
// the id arrays and kIgnoreIndex (-100) in the labels, so the loss skips padded positions.
// The decoder input is the target shifted right, starting with </s> (docs/design.md section 3):
//   target (labels)  a b c </s>
//   decoder input    </s> a b c
#include <cstdint>
#include <vector>

#include "data/ragged.h"

namespace tarn {

// Where a batch sits in the stream a rank reads: batch `batch` (0-based, counted on this
// rank) of epoch `epoch`. A checkpoint stores the position of the next batch to read.
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;

  bool operator==(const DataPosition& o) const { return epoch == o.epoch && batch == o.batch; }
  bool operator!=(const DataPosition& o) const { return !(*this == o); }
};

struct Batch {
  int64_t rows = 0;     // B
  int64_t src_len = 0;  // S
  int64_t tgt_len = 0;  // T

  std::vector<int32_t> src_ids;        // [B, S], kPadId after each source
  std::vector<float> src_mask;         // [B, S], 1 on tokens, 0 on padding
  std::vector<int32_t> src_lengths;    // [B]
  std::vector<int32_t> tgt_input_ids;  // [B, T], </s> + target[:-1], kPadId after
  std::vector<int32_t> tgt_labels;     // [B, T], target, kIgnoreIndex after
  std::vector<float> tgt_mask;         // [B, T], 1 on tokens, 0 on padding
  std::vector<int32_t> tgt_lengths;    // [B]
  std::vector<uint32_t> example_ids;   // [B], dataset index of each row
  DataPosition position;               // this batch's own position
  // The global batch this one is a rank's share of (data-parallel training); on one rank the
  // batch itself. The loss of a step is normalised by the global target count.
  int64_t global_rows = 0;
  int64_t global_tgt_tokens = 0;

  int64_t src_tokens() const;  // non-pad source tokens
  int64_t tgt_tokens() const;  // non-pad target tokens (what the loss averages over)
};

// Pads and stacks examples (sources and targets end with </s>, none empty). A rank's share
// of a small global batch may have no rows: then rows == 0 and every array is empty.
Batch make_batch(const std::vector<IdSpan>& sources, const std::vector<IdSpan>& targets);

}  // namespace tarn
