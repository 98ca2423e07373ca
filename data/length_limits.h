#pragma once
// The length limits every seq2seq dataset shares (the recipe's data.max_source_length and
// data.max_target_length).
#include <cstdint>

namespace tarn {

struct LengthLimits {
  int64_t max_source_length = 256;  // tokens, </s> included
  int64_t max_target_length = 256;  // tokens, </s> included
  bool bos = false;  // each side starts with <s> (counted in the limits), as HF BART's tokenizer does

  void validate() const;  // throws tarn::Error naming the offending field
};

}  // namespace tarn
