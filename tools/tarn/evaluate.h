#pragma once
// Perplexity of a model over a dataset: exp(mean NLL over non-pad target tokens), DESIGN.md
// section 3. Batches are read in length order (no shuffling), with dropout off.
#include <cstdint>

#include "data/dataset.h"
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
EvalResult evaluate(BartForConditionalGeneration& model, const Dataset& data, int64_t tokens_per_batch,
                    int64_t max_batches = 0);

}  // namespace tarn::app
