#pragma once
// The stream of batches one rank trains on. Each epoch the batcher materialises every
// example of the dataset for that epoch (denoising noise included, so lengths are exact),
// plans batches by token budget (data/batch_plan.h) from a seed derived from (seed, epoch),
// and hands rank r of w either
//   split_rows = false: the global batches r, r + w, r + 2w, ... whole (sharded evaluation), or
//   split_rows = true:  its share of every global batch, a contiguous run of the batch's rows
//                       balanced by tokens (data-parallel training: the same batches as one
//                       rank, split, so the rank count changes speed and not results).
// The whole stream is a function of (dataset, config, epoch), so a DataPosition is all a
// checkpoint needs to store; with split_rows it counts global batches and so does not depend
// on the rank count.
#include <cstdint>
#include <utility>
#include <vector>

#include "data/batch.h"
#include "data/batch_plan.h"
#include "data/dataset.h"
#include "data/ragged.h"

namespace tarn {

struct BatcherConfig {
  BatchPlanConfig plan;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  // true: every rank gets floor(batches / world_size) batches and the few left over are
  // skipped this epoch (they change every epoch), as data-parallel training needs equal step
  // counts. false: ranks get the leftovers too (uneven counts), for evaluation.
  bool even_shards = true;
  bool split_rows = false;

  void validate() const;  // throws tarn::Error naming the offending field
};

class Batcher {
 public:
  // `dataset` must outlive the batcher.
  Batcher(const Dataset& dataset, const BatcherConfig& config, DataPosition start = {});

  // The batch at position(), then moves to the next one, into the next epoch after the last.
  Batch next();

  // The position of the batch next() returns (store it in checkpoints). After an epoch's
  // last batch it is (next epoch, 0), never (epoch, batches_in_epoch).
  DataPosition position() const { return position_; }
  // Continues from a stored position. Throws tarn::Error if the batch index is past the end
  // of that epoch (e.g. a checkpoint written with another dataset or world size).
  void set_position(DataPosition position);

  // This rank's number of batches in the epoch of position() (it can change between epochs
  // for denoising data, whose source lengths are redrawn). Reading a whole epoch:
  //   for (size_t i = 0, n = batcher.batches_in_epoch(); i < n; ++i) use(batcher.next());
  size_t batches_in_epoch();

 private:
  void prepare_epoch(uint64_t epoch);  // materialise and plan, if not done for this epoch
  // split_rows: this rank's rows [first, second) of a global batch's row list.
  std::pair<size_t, size_t> row_share(const std::vector<uint32_t>& rows) const;

  const Dataset& dataset_;
  BatcherConfig config_;
  DataPosition position_;
  bool prepared_ = false;
  uint64_t prepared_epoch_ = 0;
  Ragged sources_, targets_;                   // every example of the prepared epoch
  std::vector<std::vector<uint32_t>> shard_;  // this rank's batches of the prepared epoch
};

}  // namespace tarn
