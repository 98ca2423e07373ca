#include "app/evaluate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/batcher.h"
#include "framework/autograd.h"
#include "framework/ops/shape_ops.h"
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
  // Each batch's mean loss stays where it was computed (on a GPU the host does not wait for
  // it), each batch goes up in one copy (StagedInputs), and the means are read back in one copy
  // at the end, then summed in batch order as before: the same bits, one wait instead of one a
  // batch.
  const Device device = model.parameters().front()->device();
  const int32_t pad_id = static_cast<int32_t>(model.config().pad_token_id);
  std::vector<Tensor> losses;
  std::vector<int64_t> counts;
  for (int64_t i = rank; i < wanted; i += world) {
    if (world > 1) batcher.set_position({0, static_cast<uint64_t>(i)});
    const Batch b = batcher.next();
    const StagedInputs staged(b, pad_id, device);
    int64_t count = 0;
    const Tensor loss = seq2seq_loss(forward_batch(model, b, staged.src_padding), staged.targets, pad_id, 0.0f, &count);
    losses.push_back(loss.view(Shape{1}));
    counts.push_back(count);
    r.tokens += count;
    ++r.batches;
  }
  if (!losses.empty()) {
    const std::vector<float> means = concat(losses, 0).to_vector();
    for (size_t i = 0; i < means.size(); ++i) r.nll_sum += static_cast<double>(means[i]) * static_cast<double>(counts[i]);
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
