#pragma once
// The glue between the data layer's batches and the model's inputs.
#include "data/batch.h"
#include "framework/staging.h"
#include "layers/bart.h"

namespace tarn::app {

// Padding flags (nonzero = pad) from a batch's 1/0 token mask.
PaddingMask padding_from_mask(const std::vector<float>& token_mask);

// Teacher-forced logits (B, T, V) for a batch.
Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& batch);

// A batch's token ids, loss targets and source padding on `device` in one copy the host does
// not wait for (framework/staging.h), for as long as this lives: the forward and the loss of
// the batch (forward_batch(model, batch, staged.src_padding), seq2seq_loss(logits,
// staged.targets, pad_id, ...)) take nothing else up to the device.
struct StagedInputs {
  StagedInputs(const Batch& batch, int32_t pad_id, Device device);
  PaddingMask src_padding;
  std::vector<int32_t> targets;  // seq2seq_targets(batch.tgt_labels, pad_id)
  StagedBatch staged;
};
Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& batch, const PaddingMask& src_padding);

}  // namespace tarn::app
