#include "app/evaluate.h"

#include <algorithm>
#include <cmath>

#include "data/batcher.h"
#include "framework/autograd.h"
#include "app/model_io.h"

namespace tarn::app {

double EvalResult::perplexity() const { return std::exp(mean_nll()); }

EvalResult evaluate(BartForConditionalGeneration& model, const Dataset& data, int64_t tokens_per_batch,
                    int64_t max_batches, kernels::Communicator* comm) {
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  BatcherConfig cfg;
  cfg.plan.max_tokens = tokens_per_batch;
  cfg.plan.shuffle = false;
  cfg.even_shards = false;
  Batcher batcher(data, cfg);
  const int64_t total = static_cast<int64_t>(batcher.batches_in_epoch());
  const int64_t wanted = max_batches > 0 ? std::min(max_batches, total) : total;
  const bool was_training = model.training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  // This rank's batches among the first `wanted`: rank, rank + world, ... (one batcher plans
  // the whole set; a rank jumps to its own batches).
  for (int64_t i = rank; i < wanted; i += world) {
    if (world > 1) batcher.set_position({0, static_cast<uint64_t>(i)});
    const Batch b = batcher.next();
    int64_t count = 0;
    const Tensor loss = seq2seq_loss(forward_batch(model, b), b.tgt_labels, model.config().pad_token_id, 0.0f, &count);
    r.nll_sum += static_cast<double>(loss.item()) * static_cast<double>(count);
    r.tokens += count;
    ++r.batches;
  }
  model.train(was_training);
  if (world > 1) {
    double sums[3] = {r.nll_sum, static_cast<double>(r.tokens), static_cast<double>(r.batches)};
    comm->all_reduce_host(sums, 3, kernels::ReduceOp::sum);
    r.nll_sum = sums[0];
    r.tokens = static_cast<int64_t>(sums[1]);
    r.batches = static_cast<int64_t>(sums[2]);
  }
  return r;
}

}  // namespace tarn::app
