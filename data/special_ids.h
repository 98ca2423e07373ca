#pragma once
// The special token ids every part of tarn agrees on (docs/design.md section 3). The tokenizer
// trains SentencePiece with these fixed positions and refuses models that differ, so data,
// model and export can use the constants without asking the tokenizer.
#include <cstdint>

namespace tarn {

constexpr int32_t kBosId = 0;  // <s>
constexpr int32_t kPadId = 1;  // <pad>
constexpr int32_t kEosId = 2;  // </s>; also the first decoder input (target shifted right)
constexpr int32_t kUnkId = 3;  // <unk>

// Label value of padded target positions in a Batch: the loss skips them. Not the pad id,
// so that a model predicting <pad> is never rewarded, and -100 is what HF/PyTorch use.
constexpr int32_t kIgnoreIndex = -100;

}  // namespace tarn
