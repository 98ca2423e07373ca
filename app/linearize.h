#pragma once
// Attention transfer, the `linearize` stage (docs/design.md section 8, "Linearizing"): before
// ordinary training, only the parameters the new attention kinds add are trained, so that each
// non-softmax attention module's output matches what softmax attention with the same (frozen)
// projections gives on the same input, layer by layer (Hedgehog, Zhang et al., ICLR 2024;
// LoLCATs, Zhang et al. 2024). The teacher is computed on the fly (layers/attention.h,
// AttentionTransfer); every layer is fed the teacher's outputs, so each loss term trains its own
// module. The loss is the sum over modules of the mean squared difference.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/batcher.h"
#include "layers/bart.h"

namespace tarn::app {

struct LinearizeOptions {
  int64_t steps = 0;
  double lr = 1e-3;          // AdamW, no weight decay, constant
  int64_t log_every = 50;    // on_log every this many steps, and at the last
};

struct LinearizeProgress {
  int64_t step = 0;                                    // 1-based
  double loss = 0;                                     // the sum of the terms
  std::vector<std::pair<std::string, double>> terms;  // per attention module
};

// The parameters the stage trains: those of non-softmax attention modules other than their
// k/v/q/out projections (feature maps, Taylor projections, the delta rule's and hybrid's own).
std::vector<std::pair<std::string, Tensor*>> transfer_parameters(BartForConditionalGeneration& model);

// Runs `o.steps` steps on `batches` (their position moves on; the caller resets it). Throws
// tarn::Error when no module has parameters to transfer (softmax everywhere, or linear with a
// fixed feature map). The model is left in the mode it was in, transfer off. Returns the last
// step's progress.
LinearizeProgress linearize(BartForConditionalGeneration& model, Batcher& batches, const LinearizeOptions& o,
                            const std::function<void(const LinearizeProgress&)>& on_log = {});

}  // namespace tarn::app
