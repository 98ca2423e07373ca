#include "data/dataset.h"

#include "kernels/check.h"

namespace tarn {

std::string DatasetStats::summary() const {
  const double mean = examples > 0 ? static_cast<double>(target_tokens) / static_cast<double>(examples) : 0.0;
  return str_cat(examples, " examples from ", lines, " lines (", empty_lines, " encoded to nothing), ",
                 truncated_source, " sources and ", truncated_target, " targets truncated, mean target ", mean,
                 " tokens");
}

}  // namespace tarn
