#include "data/batcher.h"

#include "data/seed.h"
#include "kernels/check.h"

namespace tarn {

void BatcherConfig::validate() const {
  plan.validate();
  TARN_CHECK(world_size >= 1, "distributed world_size: expected at least 1, got ", world_size);
  TARN_CHECK(rank >= 0 && rank < world_size, "distributed rank: expected a value in [0, ", world_size, "), got ",
             rank);
}

Batcher::Batcher(const Dataset& dataset, const BatcherConfig& config, DataPosition start)
    : dataset_(dataset), config_(config) {
  config.validate();
  TARN_CHECK(dataset.size() > 0, "batcher: the dataset is empty");
  if (start != DataPosition{}) set_position(start);  // else plan lazily, on first use
}

void Batcher::prepare_epoch(uint64_t epoch) {
  if (prepared_ && prepared_epoch_ == epoch) return;
  const size_t n = dataset_.size();
  sources_ = Ragged();
  targets_ = Ragged();
  std::vector<int32_t> src_len(n), tgt_len(n);
  for (size_t i = 0; i < n; ++i) {
    const Example ex = dataset_.example(i, epoch);
    src_len[i] = static_cast<int32_t>(ex.source.size());
    tgt_len[i] = static_cast<int32_t>(ex.target.size());
    sources_.push_back(ex.source);
    targets_.push_back(ex.target);
  }
  auto global = plan_batches(src_len, tgt_len, config_.plan, derive_seed(config_.seed, SeedPurpose::kShuffle, epoch));

  const auto world = static_cast<size_t>(config_.world_size), rank = static_cast<size_t>(config_.rank);
  const size_t usable = config_.even_shards ? global.size() / world * world : global.size();
  TARN_CHECK(usable > rank, "batcher: epoch ", epoch, " has ", global.size(), " batches, too few for ", world,
             " ranks (lower batch.max_tokens or use more data)");
  shard_.clear();
  for (size_t b = rank; b < usable; b += world) shard_.push_back(std::move(global[b]));
  prepared_ = true;
  prepared_epoch_ = epoch;
}

size_t Batcher::batches_in_epoch() {
  prepare_epoch(position_.epoch);
  return shard_.size();
}

void Batcher::set_position(DataPosition position) {
  prepare_epoch(position.epoch);
  TARN_CHECK(position.batch <= shard_.size(), "data position: batch ", position.batch, " of epoch ", position.epoch,
             " is past the epoch's ", shard_.size(), " batches on rank ", config_.rank,
             " (was the checkpoint written with another dataset, batch size or world size?)");
  position_ = position;
  if (position_.batch == shard_.size()) position_ = {position_.epoch + 1, 0};  // the epoch is done
}

Batch Batcher::next() {
  prepare_epoch(position_.epoch);
  const auto& rows = shard_[position_.batch];
  std::vector<IdSpan> sources, targets;
  sources.reserve(rows.size());
  targets.reserve(rows.size());
  for (uint32_t i : rows) {
    sources.push_back(sources_.row(i));
    targets.push_back(targets_.row(i));
  }
  Batch batch = make_batch(sources, targets);
  batch.example_ids = rows;
  batch.position = position_;
  // Past the epoch's last batch the next one is the new epoch's first: keeping the position
  // normalised makes batches_in_epoch() and a checkpointed position unambiguous.
  if (++position_.batch == shard_.size()) position_ = {position_.epoch + 1, 0};
  return batch;
}

}  // namespace tarn
