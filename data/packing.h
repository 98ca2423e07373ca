#pragma once
// Turns tokenised lines into examples for denoising: one line per example, or, for
// long-sequence work, consecutive lines packed together up to a token budget. The lines of a
// packed example stay separate so that sentence permutation can shuffle them.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/ragged.h"

namespace tarn {

struct PackedLines {
  Ragged lines;                        // the kept lines, each cut to at most `budget` tokens
  std::vector<size_t> example_begin;   // example e is lines [example_begin[e], example_begin[e + 1])
  int64_t truncated = 0;               // lines longer than the budget (cut, kept)
  int64_t empty = 0;                   // lines with no token (dropped)

  size_t examples() const { return example_begin.size() - 1; }
};

// With pack = false every non-empty line is its own example. With pack = true consecutive
// lines join an example while its total stays within `budget` tokens; an over-long line is cut
// to the budget and starts an example of its own. Line order is preserved.
PackedLines pack_lines(const Ragged& lines, size_t budget, bool pack);

}  // namespace tarn
