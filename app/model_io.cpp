#include "app/model_io.h"

namespace tarn::app {

PaddingMask padding_from_mask(const std::vector<float>& token_mask) {
  PaddingMask pad(token_mask.size());
  for (size_t i = 0; i < token_mask.size(); ++i) pad[i] = token_mask[i] == 0.0f;
  return pad;
}

Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& b) {
  return forward_batch(model, b, padding_from_mask(b.src_mask));
}

Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& b, const PaddingMask& src_padding) {
  // Targets are right-padded and decoder self-attention is causal, so the target needs no mask:
  // pad positions never influence real ones, and their labels are ignored by the loss.
  return model.forward(b.src_ids, Shape{b.rows, b.src_len}, src_padding, b.tgt_input_ids, Shape{b.rows, b.tgt_len});
}

StagedInputs::StagedInputs(const Batch& b, int32_t pad_id, Device device)
    : src_padding(padding_from_mask(b.src_mask)),
      targets(seq2seq_targets(b.tgt_labels, pad_id)),
      staged(device, {&b.src_ids, &b.tgt_input_ids, &targets}, {&src_padding}, {b.rows}) {}

}  // namespace tarn::app
