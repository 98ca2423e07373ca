#pragma once
// Perplexity of a model over a dataset: exp(mean NLL over non-pad target tokens), docs/design.md
// section 3. Batches are read in length order (no shuffling), with dropout off.
#include <cstdint>

#include "data/dataset.h"
#include "kernels/collectives.h"
#include "layers/bart.h"

namespace tarn::app {

struct EvalResult {
  double nll_sum = 0;   // over every counted target token
  int64_t tokens = 0;   // target tokens counted
  int64_t batches = 0;
  double mean_nll() const { return tokens ? nll_sum / static_cast<double>(tokens) : 0.0; }
  double perplexity() const;
};

// max_batches 0 = the whole dataset. The model is left in the train/eval mode it was in.
// With a communicator of several ranks, rank r evaluates the batches r, r + world, ... and the
// sums are combined: every rank gets the figure one rank would (the same batches; the NLL
// sum in another order, so equal to rounding in the last bits of a double).
EvalResult evaluate(BartForConditionalGeneration& model, const Dataset& data, int64_t tokens_per_batch,
                    int64_t max_batches = 0, kernels::Communicator* comm = nullptr);

}  // namespace tarn::app
