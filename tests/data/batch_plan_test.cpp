#include "data/batch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "framework/rng.h"
#include "kernels/check.h"

namespace tarn {
namespace {

struct Lengths {
  std::vector<int32_t> src, tgt;
};

// n examples with source and target lengths uniform in [1, max_len], drawn with Philox.
Lengths random_lengths(size_t n, uint32_t max_len, uint64_t seed) {
  Philox rng(seed);
  Lengths l;
  for (size_t i = 0; i < n; ++i) {
    l.src.push_back(1 + static_cast<int32_t>(rng.below(max_len)));
    l.tgt.push_back(1 + static_cast<int32_t>(rng.below(max_len)));
  }
  return l;
}

int64_t padded_tokens(const std::vector<uint32_t>& batch, const Lengths& l) {
  int32_t longest = 0;
  for (uint32_t i : batch) longest = std::max({longest, l.src[i], l.tgt[i]});
  return static_cast<int64_t>(batch.size()) * longest;
}

TEST(BatchPlan, EveryBatchFitsTheTokenBudgetAndRowLimit) {
  const Lengths l = random_lengths(3000, 120, 1);
  BatchPlanConfig cfg;
  cfg.max_tokens = 1000;
  cfg.max_rows = 24;
  for (const auto& b : plan_batches(l.src, l.tgt, cfg, 5)) {
    EXPECT_LE(padded_tokens(b, l), cfg.max_tokens);
    EXPECT_LE(static_cast<int64_t>(b.size()), cfg.max_rows);
    EXPECT_FALSE(b.empty());
  }
}

TEST(BatchPlan, EveryExampleIsInExactlyOneBatch) {
  const Lengths l = random_lengths(2500, 64, 2);
  BatchPlanConfig cfg;
  cfg.max_tokens = 700;
  std::vector<int> seen(l.src.size(), 0);
  for (const auto& b : plan_batches(l.src, l.tgt, cfg, 6))
    for (uint32_t i : b) ++seen[i];
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(BatchPlan, LengthBucketsKeepPaddingLow) {
  // Random grouping would pad to about twice the real tokens here; buckets stay close to 1x.
  const Lengths l = random_lengths(5000, 200, 3);
  BatchPlanConfig cfg;
  cfg.max_tokens = 4096;
  int64_t padded = 0, real = 0;
  for (const auto& b : plan_batches(l.src, l.tgt, cfg, 7)) {
    padded += padded_tokens(b, l);
    for (uint32_t i : b) real += std::max(l.src[i], l.tgt[i]);
  }
  EXPECT_LT(static_cast<double>(padded) / static_cast<double>(real), 1.15);
}

TEST(BatchPlan, SameSeedSamePlanOtherSeedOtherPlan) {
  const Lengths l = random_lengths(1000, 50, 4);
  BatchPlanConfig cfg;
  cfg.max_tokens = 500;
  const auto a = plan_batches(l.src, l.tgt, cfg, 1);
  EXPECT_EQ(a, plan_batches(l.src, l.tgt, cfg, 1));
  EXPECT_NE(a, plan_batches(l.src, l.tgt, cfg, 2));
}

TEST(BatchPlan, UnshuffledPlanIsSortedByLengthWhateverTheSeed) {
  const Lengths l = random_lengths(1000, 50, 5);
  BatchPlanConfig cfg;
  cfg.max_tokens = 500;
  cfg.shuffle = false;
  cfg.bucket_width = 1;
  const auto a = plan_batches(l.src, l.tgt, cfg, 1);
  EXPECT_EQ(a, plan_batches(l.src, l.tgt, cfg, 2));
  int32_t last = 0;
  for (const auto& b : a)
    for (uint32_t i : b) {
      const int32_t len = std::max(l.src[i], l.tgt[i]);
      EXPECT_GE(len, last);
      last = len;
    }
}

TEST(BatchPlan, ExampleLongerThanTheBudgetIsAnErrorNamingMaxTokens) {
  BatchPlanConfig cfg;
  cfg.max_tokens = 10;
  try {
    plan_batches({3, 11}, {2, 4}, cfg, 0);
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_tokens"), std::string::npos) << e.what();
  }
}

TEST(BatchPlan, InvalidConfigIsAnErrorNamingTheField) {
  BatchPlanConfig cfg;
  cfg.bucket_width = 0;
  try {
    cfg.validate();
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch.bucket_width"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tarn
