#include "app/model_io.h"

namespace tarn::app {

PaddingMask padding_from_mask(const std::vector<float>& token_mask) {
  PaddingMask pad(token_mask.size());
  for (size_t i = 0; i < token_mask.size(); ++i) pad[i] = token_mask[i] == 0.0f;
  return pad;
}

Tensor forward_batch(const BartForConditionalGeneration& model, const Batch& b) {
  // Targets are right-padded and decoder self-attention is causal, so the target needs no mask:
  // pad positions never influence real ones, and their labels are ignored by the loss.
  return model.forward(b.src_ids, Shape{b.rows, b.src_len}, padding_from_mask(b.src_mask), b.tgt_input_ids,
                       Shape{b.rows, b.tgt_len});
}

}  // namespace tarn::app
