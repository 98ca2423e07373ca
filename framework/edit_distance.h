#pragma once
// Edit distance between two sequences (a string's characters, a line's words): the fewest
// insertions, deletions and substitutions that turn `a` into `b` (Levenshtein), and with
// `adjacent_swaps` also swaps of two neighbours (optimal string alignment: Damerau-Levenshtein
// in which no part is edited twice). A recipe key's "did you mean" counts a swap as one typo
// (framework/config/schema.cpp); a word error rate does not (app/word_errors.cpp).
#include <algorithm>
#include <cstdint>
#include <vector>

namespace tarn {

template <class Sequence>
int64_t edit_distance(const Sequence& a, const Sequence& b, bool adjacent_swaps = false) {
  // Rows of the dynamic programme: row[j] is the distance between the first i items of a and
  // the first j of b; before and before2 hold rows i - 1 and i - 2.
  const size_t m = b.size();
  std::vector<int64_t> before2(m + 1), before(m + 1), row(m + 1);
  for (size_t j = 0; j <= m; ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    before2.swap(before);
    before.swap(row);
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= m; ++j) {
      row[j] = std::min({before[j] + 1, row[j - 1] + 1, before[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (adjacent_swaps && i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before2[j - 2] + 1);
    }
  }
  return row[m];
}

}  // namespace tarn
