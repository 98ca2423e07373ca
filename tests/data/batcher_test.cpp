#include "data/batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/denoising_dataset.h"
#include "data/pair_dataset.h"
#include "framework/rng.h"
#include "kernels/check.h"

namespace tarn {
namespace {

constexpr int32_t kMask = 4;

// n lines of 1..max_len tokens; tokens encode the line index so batches can be checked.
Ragged random_lines(size_t n, uint32_t max_len, uint64_t seed) {
  Philox rng(seed);
  Ragged r;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> line(1 + rng.below(max_len));
    for (size_t k = 0; k < line.size(); ++k) line[k] = 10 + static_cast<int32_t>((i * 7 + k) % 1000);
    r.push_back(line);
  }
  return r;
}

DenoisingDataset make_denoising(size_t n, uint64_t seed = 3) {
  DenoisingOptions options;
  options.max_source_length = options.max_target_length = 64;
  options.seed = seed;
  return DenoisingDataset(random_lines(n, 80, 17), kMask, options);
}

BatcherConfig make_config(int64_t max_tokens = 512) {
  BatcherConfig cfg;
  cfg.plan.max_tokens = max_tokens;
  cfg.seed = 21;
  return cfg;
}

std::vector<Batch> read_epoch(Batcher& batcher) {
  std::vector<Batch> out;
  const size_t n = batcher.batches_in_epoch();
  for (size_t i = 0; i < n; ++i) out.push_back(batcher.next());
  return out;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.example_ids, b.example_ids);
  EXPECT_EQ(a.src_ids, b.src_ids);
  EXPECT_EQ(a.tgt_input_ids, b.tgt_input_ids);
  EXPECT_EQ(a.tgt_labels, b.tgt_labels);
}

TEST(Batcher, EachEpochCoversEveryExampleExactlyOnce) {
  const auto data = make_denoising(1000);
  Batcher batcher(data, make_config());
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(data.size(), 0);
    for (const Batch& b : read_epoch(batcher)) {
      EXPECT_EQ(b.position.epoch, static_cast<uint64_t>(epoch));
      for (uint32_t i : b.example_ids) ++seen[i];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "epoch " << epoch;
  }
}

TEST(Batcher, BatchesRespectTheTokenBudgetAndMatchTheDataset) {
  const auto data = make_denoising(600);
  const BatcherConfig cfg = make_config(300);
  Batcher batcher(data, cfg);
  for (const Batch& b : read_epoch(batcher)) {
    EXPECT_LE(b.rows * std::max(b.src_len, b.tgt_len), cfg.plan.max_tokens);
    // Row r is the dataset's example, noise included: noise does not depend on batch order.
    for (int64_t r = 0; r < b.rows; ++r) {
      const Example ex = data.example(b.example_ids[r], b.position.epoch);
      ASSERT_EQ(b.src_lengths[r], static_cast<int32_t>(ex.source.size()));
      EXPECT_TRUE(std::equal(ex.source.begin(), ex.source.end(), b.src_ids.begin() + r * b.src_len));
      EXPECT_TRUE(std::equal(ex.target.begin(), ex.target.end(), b.tgt_labels.begin() + r * b.tgt_len));
    }
  }
}

TEST(Batcher, EpochsDifferInBatchesAndNoise) {
  const auto data = make_denoising(500);
  Batcher batcher(data, make_config());
  const auto e0 = read_epoch(batcher);
  const auto e1 = read_epoch(batcher);
  ASSERT_EQ(e1.front().position, (DataPosition{1, 0}));
  std::set<std::vector<uint32_t>> first;
  for (const auto& b : e0) first.insert(b.example_ids);
  size_t repeated = 0;
  for (const auto& b : e1) repeated += first.count(b.example_ids);
  EXPECT_LT(repeated, e1.size() / 4);  // batch compositions are reshuffled
  EXPECT_NE(data.example(0, 0).source, data.example(0, 1).source);
}

TEST(Batcher, RestoresExactlyFromASavedPositionAcrossEpochs) {
  const auto data = make_denoising(400);
  Batcher original(data, make_config());
  const size_t per_epoch = original.batches_in_epoch();
  for (size_t i = 0; i < per_epoch - 2; ++i) original.next();
  const DataPosition saved = original.position();  // two batches before the epoch ends
  std::vector<Batch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(original.next());  // crosses into epoch 1

  Batcher resumed(data, make_config(), saved);  // e.g. a new process after a checkpoint
  for (const auto& want : expected) expect_same_batch(resumed.next(), want);

  Batcher seeked(data, make_config());
  seeked.next();
  seeked.set_position(saved);
  for (const auto& want : expected) expect_same_batch(seeked.next(), want);
}

TEST(Batcher, PositionOfTheLastBatchRollsIntoTheNextEpoch) {
  const auto data = make_denoising(100);
  Batcher batcher(data, make_config());
  const size_t n = batcher.batches_in_epoch();
  for (size_t i = 0; i + 1 < n; ++i) batcher.next();
  EXPECT_EQ(batcher.position(), (DataPosition{0, n - 1}));
  EXPECT_EQ(batcher.next().position, (DataPosition{0, n - 1}));
  EXPECT_EQ(batcher.position(), (DataPosition{1, 0}));
  EXPECT_EQ(batcher.next().position, (DataPosition{1, 0}));
  EXPECT_EQ(batcher.position(), (DataPosition{1, 1}));
}

TEST(Batcher, PositionPastTheEpochEndIsAnError) {
  const auto data = make_denoising(100);
  Batcher batcher(data, make_config());
  const size_t n = batcher.batches_in_epoch();
  EXPECT_THROW(batcher.set_position({0, n + 1}), Error);
  batcher.set_position({0, n});  // the end of an epoch is the start of the next
  EXPECT_EQ(batcher.position(), (DataPosition{1, 0}));
  EXPECT_THROW(Batcher(data, make_config(), {2, n + 50}), Error);
}

TEST(Batcher, RanksPartitionTheGlobalBatchesEvenly) {
  const auto data = make_denoising(1000);
  constexpr int kWorld = 3;
  Batcher single(data, make_config(256));
  const auto global = read_epoch(single);
  const size_t per_rank = global.size() / kWorld;

  std::set<uint32_t> covered;
  size_t total_rows = 0;
  for (int rank = 0; rank < kWorld; ++rank) {
    BatcherConfig cfg = make_config(256);
    cfg.rank = rank;
    cfg.world_size = kWorld;
    Batcher shard(data, cfg);
    const auto mine = read_epoch(shard);
    ASSERT_EQ(mine.size(), per_rank) << "rank " << rank;
    for (size_t k = 0; k < mine.size(); ++k) {
      EXPECT_EQ(mine[k].example_ids, global[rank + k * kWorld].example_ids);  // every w-th batch
      covered.insert(mine[k].example_ids.begin(), mine[k].example_ids.end());
      total_rows += mine[k].example_ids.size();
    }
  }
  EXPECT_EQ(covered.size(), total_rows);  // disjoint
  size_t kept_rows = 0;
  for (size_t b = 0; b < per_rank * kWorld; ++b) kept_rows += global[b].example_ids.size();
  EXPECT_EQ(total_rows, kept_rows);
}

TEST(Batcher, UnevenShardsCoverEveryExample) {
  Ragged src = random_lines(301, 20, 5), tgt = random_lines(301, 20, 6);
  PairDataset data(src, tgt, {});
  constexpr int kWorld = 4;
  std::vector<int> seen(data.size(), 0);
  for (int rank = 0; rank < kWorld; ++rank) {
    BatcherConfig cfg = make_config(64);
    cfg.rank = rank;
    cfg.world_size = kWorld;
    cfg.even_shards = false;
    cfg.plan.shuffle = false;
    Batcher shard(data, cfg);
    for (const Batch& b : read_epoch(shard))
      for (uint32_t i : b.example_ids) ++seen[i];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(Batcher, TooFewBatchesForTheRanksIsAnError) {
  const auto data = make_denoising(4);
  BatcherConfig cfg = make_config(4096);
  cfg.world_size = 8;
  cfg.rank = 7;
  Batcher batcher(data, cfg);
  EXPECT_THROW(batcher.next(), Error);
}

TEST(Batcher, SplitRowsGiveEachRankAContiguousTokenBalancedShareOfEveryGlobalBatch) {
  const auto data = make_denoising(600);
  BatcherConfig whole_cfg = make_config(1024);
  whole_cfg.split_rows = true;
  Batcher whole(data, whole_cfg);
  const std::vector<Batch> global = read_epoch(whole);
  for (int world : {2, 3, 7}) {
    std::vector<std::vector<Batch>> shares;
    for (int r = 0; r < world; ++r) {
      BatcherConfig cfg = whole_cfg;
      cfg.rank = r;
      cfg.world_size = world;
      Batcher b(data, cfg);
      ASSERT_EQ(b.batches_in_epoch(), global.size()) << "every rank walks every global batch";
      shares.push_back(read_epoch(b));
    }
    for (size_t i = 0; i < global.size(); ++i) {
      std::vector<uint32_t> joined;
      int64_t tgt = 0;
      for (int r = 0; r < world; ++r) {
        const Batch& s = shares[r][i];
        EXPECT_EQ(s.position, global[i].position);
        EXPECT_EQ(s.global_rows, global[i].rows);
        EXPECT_EQ(s.global_tgt_tokens, global[i].tgt_tokens());
        EXPECT_EQ(s.rows, static_cast<int64_t>(s.example_ids.size()));
        joined.insert(joined.end(), s.example_ids.begin(), s.example_ids.end());
        tgt += s.rows ? s.tgt_tokens() : 0;
      }
      EXPECT_EQ(joined, global[i].example_ids) << "the shares are not the batch's rows in order";
      EXPECT_EQ(tgt, global[i].tgt_tokens());
    }
  }
}

TEST(Batcher, SplitRowsOnOneRankIsTheWholeBatch) {
  const auto data = make_denoising(400);
  BatcherConfig split = make_config(700);
  split.split_rows = true;
  Batcher a(data, make_config(700)), b(data, split);
  const auto ea = read_epoch(a), eb = read_epoch(b);
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    expect_same_batch(ea[i], eb[i]);
    EXPECT_EQ(eb[i].global_tgt_tokens, eb[i].tgt_tokens());
  }
}

TEST(Batcher, SplitRowsBalanceTokensAcrossTwoRanks) {
  const auto data = make_denoising(800);
  int64_t worst = 0, longest_row = 0;
  std::vector<std::vector<Batch>> shares;
  for (int r = 0; r < 2; ++r) {
    BatcherConfig cfg = make_config(4096);
    cfg.split_rows = true;
    cfg.rank = r;
    cfg.world_size = 2;
    Batcher b(data, cfg);
    shares.push_back(read_epoch(b));
  }
  for (size_t i = 0; i < shares[0].size(); ++i) {
    int64_t t[2];
    for (int r = 0; r < 2; ++r) {
      const Batch& s = shares[r][i];
      t[r] = s.rows ? s.src_tokens() + s.tgt_tokens() : 0;
      for (int64_t k = 0; k < s.rows; ++k)
        longest_row = std::max<int64_t>(longest_row, s.src_lengths[k] + s.tgt_lengths[k]);
    }
    worst = std::max(worst, std::abs(t[0] - t[1]));
  }
  EXPECT_LE(worst, longest_row) << "a cut is off by more than one row's tokens";
}

TEST(Batcher, InvalidRankIsAnError) {
  const auto data = make_denoising(10);
  BatcherConfig cfg = make_config();
  cfg.world_size = 2;
  cfg.rank = 2;
  EXPECT_THROW(Batcher(data, cfg), Error);
}

}  // namespace
}  // namespace tarn
