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

  shard_.clear();
  prepared_ = true;
  prepared_epoch_ = epoch;
  if (config_.split_rows) {  // every rank walks every global batch and takes its rows in next()
    shard_ = std::move(global);
    return;
  }
  const auto world = static_cast<size_t>(config_.world_size), rank = static_cast<size_t>(config_.rank);
  const size_t usable = config_.even_shards ? global.size() / world * world : global.size();
  TARN_CHECK(usable > rank, "batcher: epoch ", epoch, " has ", global.size(), " batches, too few for ", world,
             " ranks (lower batch.max_tokens or use more data)");
  for (size_t b = rank; b < usable; b += world) shard_.push_back(std::move(global[b]));
}

std::pair<size_t, size_t> Batcher::row_share(const std::vector<uint32_t>& rows) const {
  // Contiguous shares: a row goes to rank r when its midpoint in the running token count lies
  // in [r / world, (r + 1) / world) of the batch's tokens, so two ranks' shares differ by at
  // most one row's tokens. Rank-independent arithmetic: the shares partition the batch.
  const auto world = static_cast<size_t>(config_.world_size);
  std::vector<int64_t> prefix(rows.size() + 1, 0);
  for (size_t i = 0; i < rows.size(); ++i)
    prefix[i + 1] = prefix[i] + static_cast<int64_t>(sources_.row(rows[i]).size() + targets_.row(rows[i]).size());
  const int64_t total = prefix.back();
  const auto w = static_cast<int64_t>(world);
  auto cut = [&](size_t r) {  // the first row whose midpoint lies at or past r / world of the tokens
    if (r >= world) return rows.size();
    size_t i = 0;
    while (i < rows.size() && (prefix[i] + prefix[i + 1]) * w < 2 * total * static_cast<int64_t>(r)) ++i;
    return i;
  };
  const auto rank = static_cast<size_t>(config_.rank);
  return {cut(rank), cut(rank + 1)};
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
  const auto& all_rows = shard_[position_.batch];
  int64_t global_tgt_tokens = 0;
  for (uint32_t i : all_rows) global_tgt_tokens += static_cast<int64_t>(targets_.row(i).size());
  std::vector<uint32_t> rows = all_rows;
  if (config_.split_rows) {
    const auto [begin, end] = row_share(all_rows);
    rows.assign(all_rows.begin() + static_cast<std::ptrdiff_t>(begin), all_rows.begin() + static_cast<std::ptrdiff_t>(end));
  }
  std::vector<IdSpan> sources, targets;
  sources.reserve(rows.size());
  targets.reserve(rows.size());
  for (uint32_t i : rows) {
    sources.push_back(sources_.row(i));
    targets.push_back(targets_.row(i));
  }
  Batch batch = rows.empty() ? Batch{} : make_batch(sources, targets);  // a rank may get no row of a tiny batch
  batch.example_ids = rows;
  batch.position = position_;
  batch.global_rows = static_cast<int64_t>(all_rows.size());
  batch.global_tgt_tokens = global_tgt_tokens;
  // Past the epoch's last batch the next one is the new epoch's first: keeping the position
  // normalised makes batches_in_epoch() and a checkpointed position unambiguous.
  if (++position_.batch == shard_.size()) position_ = {position_.epoch + 1, 0};
  return batch;
}

}  // namespace tarn
