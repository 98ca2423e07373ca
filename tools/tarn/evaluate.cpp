#include "tools/tarn/evaluate.h"

#include <cmath>

#include "data/batcher.h"
#include "framework/autograd.h"
#include "tools/tarn/model_io.h"

namespace tarn::app {

double EvalResult::perplexity() const { return std::exp(mean_nll()); }

EvalResult evaluate(BartForConditionalGeneration& model, const Dataset& data, int64_t tokens_per_batch,
                    int64_t max_batches) {
  BatcherConfig cfg;
  cfg.plan.max_tokens = tokens_per_batch;
  cfg.plan.shuffle = false;
  cfg.even_shards = false;
  Batcher batcher(data, cfg);
  const bool was_training = model.training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  const int64_t total = static_cast<int64_t>(batcher.batches_in_epoch());
  const int64_t n = max_batches > 0 ? std::min(max_batches, total) : total;
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = batcher.next();
    int64_t count = 0;
    const Tensor loss = seq2seq_loss(forward_batch(model, b), b.tgt_labels, model.config().pad_token_id, 0.0f, &count);
    r.nll_sum += static_cast<double>(loss.item()) * static_cast<double>(count);
    r.tokens += count;
    ++r.batches;
  }
  model.train(was_training);
  return r;
}

}  // namespace tarn::app
