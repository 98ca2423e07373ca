#include "tools/tarn/evaluate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "data/batcher.h"
#include "framework/autograd.h"
#include "tools/tarn/model_io.h"

namespace tarn::app {

double EvalResult::perplexity() const { return std::exp(mean_nll()); }

EvalResult evaluate(BartForConditionalGeneration& model, const Dataset& data, int64_t tokens_per_batch,
                    int64_t max_batches, kernels::Communicator* comm) {
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  BatcherConfig cfg;
  cfg.plan.max_tokens = tokens_per_batch;
  cfg.plan.shuffle = false;
  cfg.even_shards = false;
  cfg.rank = rank;
  cfg.world_size = world;
  // The number of global batches; a rank's batcher needs at least one batch of its own.
  BatcherConfig whole = cfg;
  whole.rank = 0;
  whole.world_size = 1;
  auto batcher = std::make_unique<Batcher>(data, whole);
  const int64_t global_batches = static_cast<int64_t>(batcher->batches_in_epoch());
  const int64_t wanted = max_batches > 0 ? std::min(max_batches, global_batches) : global_batches;
  const bool was_training = model.training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  // This rank's batches among the first `wanted` global ones: rank, rank + world, ...
  const int64_t n = wanted > rank ? (wanted - rank + world - 1) / world : 0;
  if (world > 1) {
    batcher.reset();
    if (n > 0) batcher = std::make_unique<Batcher>(data, cfg);
  }
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = batcher->next();
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
