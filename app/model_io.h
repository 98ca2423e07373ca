#pragma once
// The glue between the data layer's batches and the model's inputs.
#include "data/batch.h"
#include "layers/bart.h"

namespace tarn::app {

// Padding flags (nonzero = pad) from a batch's 1/0 token mask.
PaddingMask padding_from_mask(const std::vector<float>& token_mask);

// Teacher-forced logits (B, T, V) for a batch.
Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& batch);

}  // namespace tarn::app
