#include "data/packing.h"

#include <algorithm>

#include "kernels/check.h"

namespace tarn {

PackedLines pack_lines(const Ragged& lines, size_t budget, bool pack) {
  TARN_CHECK(budget > 0, "pack_lines: the token budget must be positive");
  PackedLines out;
  out.lines.reserve(lines.rows(), lines.total());
  out.example_begin.push_back(0);
  size_t open_tokens = 0;  // tokens in the example being filled (0: none open)
  for (size_t i = 0; i < lines.rows(); ++i) {
    IdSpan line = lines.row(i);
    if (line.empty()) {
      ++out.empty;
      continue;
    }
    if (line.size() > budget) {
      ++out.truncated;
      line.len = budget;
    }
    // Close the open example when this line does not fit in it (or when not packing).
    if (open_tokens > 0 && (!pack || open_tokens + line.size() > budget)) {
      out.example_begin.push_back(out.lines.rows());
      open_tokens = 0;
    }
    out.lines.push_back(line);
    open_tokens += line.size();
  }
  if (open_tokens > 0) out.example_begin.push_back(out.lines.rows());
  return out;
}

}  // namespace tarn
