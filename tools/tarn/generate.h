#pragma once
// Decoding for `tarn generate` and `tarn denoise`: greedy and beam search over the model's
// incremental decoder (linear attention: the recurrent state, O(1) per token; softmax: the
// key/value cache).
#include <cstdint>
#include <vector>

#include "layers/bart.h"

namespace tarn::app {

struct GenerateOptions {
  int beam = 1;             // 1 = greedy
  int64_t max_length = 128;  // generated tokens, </s> included
  double length_penalty = 1.0;  // beam: hypotheses ranked by log p / length^penalty
};

// Each source (token ids ending with </s>) -> generated ids without the leading </s> and
// without the final </s>.
std::vector<std::vector<int32_t>> generate(const BartForConditionalGeneration& model,
                                           const std::vector<std::vector<int32_t>>& sources,
                                           const GenerateOptions& options);

}  // namespace tarn::app
