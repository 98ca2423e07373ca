// Packing, the denoising dataset and the pair dataset, on hand-made token ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data/denoising_dataset.h"
#include "data/packing.h"
#include "data/pair_dataset.h"
#include "data/special_ids.h"
#include "kernels/check.h"

namespace tarn {
namespace {

constexpr int32_t kMask = 4;

// Line i has lengths[i] tokens, all equal to 100 + i (so every token names its line).
Ragged lines_of_lengths(const std::vector<size_t>& lengths) {
  Ragged r;
  for (size_t i = 0; i < lengths.size(); ++i) r.push_back(std::vector<int32_t>(lengths[i], 100 + int32_t(i)));
  return r;
}

std::vector<int32_t> with_eos(std::vector<int32_t> v) {
  v.push_back(kEosId);
  return v;
}

TEST(Packing, UnpackedGivesOneExamplePerNonEmptyLine) {
  const auto packed = pack_lines(lines_of_lengths({3, 0, 5, 2}), 10, /*pack=*/false);
  ASSERT_EQ(packed.examples(), 3u);
  EXPECT_EQ(packed.example_begin, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(packed.empty, 1);
  EXPECT_EQ(packed.truncated, 0);
  EXPECT_EQ(packed.lines.row(1)[0], 102);  // the empty line 1 is gone
}

TEST(Packing, PackedExamplesStayWithinTheBudgetAndKeepLineOrder) {
  const std::vector<size_t> lengths = {3, 4, 2, 6, 1, 1, 1, 7, 3};
  constexpr size_t kBudget = 8;
  const auto packed = pack_lines(lines_of_lengths(lengths), kBudget, /*pack=*/true);
  // Greedy: [3 4] [2 6] [1 1 1] [7] [3]
  EXPECT_EQ(packed.example_begin, (std::vector<size_t>{0, 2, 4, 7, 8, 9}));
  for (size_t e = 0; e < packed.examples(); ++e) {
    size_t tokens = 0;
    for (size_t l = packed.example_begin[e]; l < packed.example_begin[e + 1]; ++l) tokens += packed.lines.row_size(l);
    EXPECT_LE(tokens, kBudget);
  }
  for (size_t l = 0; l < packed.lines.rows(); ++l) EXPECT_EQ(packed.lines.row(l)[0], 100 + int32_t(l));
}

TEST(Packing, OverLongLinesAreCutToTheBudgetAndCounted) {
  for (bool pack : {false, true}) {
    const auto packed = pack_lines(lines_of_lengths({2, 20, 3, 9}), 8, pack);
    EXPECT_EQ(packed.truncated, 2) << pack;
    EXPECT_EQ(packed.lines.row_size(1), 8u) << pack;
    EXPECT_EQ(packed.lines.row_size(3), 8u) << pack;
  }
}

TEST(DenoisingDataset, TargetIsTextPlusEosAndSourceIsNoisedTextPlusEos) {
  DenoisingOptions options;
  options.seed = 1;
  const Ragged lines = lines_of_lengths({40, 25});
  DenoisingDataset data(lines, kMask, options);
  ASSERT_EQ(data.size(), 2u);
  const Example ex = data.example(0, 0);
  EXPECT_EQ(ex.target, with_eos(lines.row(0).to_vector()));
  ASSERT_FALSE(ex.source.empty());
  EXPECT_EQ(ex.source.back(), kEosId);
  EXPECT_EQ(std::count(ex.source.begin(), ex.source.end(), kEosId), 1);
  EXPECT_GT(std::count(ex.source.begin(), ex.source.end(), kMask), 0);
  EXPECT_LT(ex.source.size(), ex.target.size());  // 12 tokens masked, ~4 masks added
}

TEST(DenoisingDataset, NoiseDependsOnlyOnSeedEpochAndIndex) {
  DenoisingOptions options;
  options.seed = 9;
  DenoisingDataset data(lines_of_lengths({50, 50, 50, 50}), kMask, options);
  const Example first = data.example(2, 3);
  data.example(0, 3);  // asking for other examples in between changes nothing
  data.example(3, 4);
  EXPECT_EQ(data.example(2, 3).source, first.source);
  EXPECT_NE(data.example(2, 4).source, first.source);  // a new epoch draws new noise
  DenoisingDataset same(lines_of_lengths({50, 50, 50, 50}), kMask, options);
  EXPECT_EQ(same.example(2, 3).source, first.source);  // a fresh process agrees (resume)
  options.seed = 10;
  DenoisingDataset other(lines_of_lengths({50, 50, 50, 50}), kMask, options);
  EXPECT_NE(other.example(2, 3).source, first.source);
}

TEST(DenoisingDataset, OverLongLinesAreTruncatedToTheSmallerLimitAndCounted) {
  DenoisingOptions options;
  options.max_source_length = 16;
  options.max_target_length = 32;
  DenoisingDataset data(lines_of_lengths({10, 40, 15, 16}), kMask, options);
  EXPECT_EQ(data.stats().truncated_source, 2);  // 40 and 16 exceed 15 text tokens + </s>
  EXPECT_EQ(data.stats().truncated_target, 0);
  for (size_t i = 0; i < data.size(); ++i) {
    for (uint64_t epoch = 0; epoch < 20; ++epoch) {
      const Example ex = data.example(i, epoch);
      EXPECT_LE(ex.target.size(), 16u);
      EXPECT_LE(ex.source.size(), 16u);  // insertions never push the source past its limit
      EXPECT_EQ(ex.source.back(), kEosId);
    }
  }
}

TEST(DenoisingDataset, PackedExamplesPermuteTheirLinesInTheSource) {
  DenoisingOptions options;
  options.pack = true;
  options.max_source_length = options.max_target_length = 64;
  options.noise.mask_ratio = 0.0;  // permutation only, so the source is easy to read
  DenoisingDataset data(lines_of_lengths({5, 5, 5, 5, 5, 5}), kMask, options);
  ASSERT_EQ(data.size(), 1u);
  const Example ex = data.example(0, 0);
  EXPECT_TRUE(std::is_sorted(ex.target.begin(), ex.target.end() - 1));  // the text in line order
  std::vector<int32_t> sorted_source(ex.source.begin(), ex.source.end() - 1);
  EXPECT_FALSE(std::is_sorted(sorted_source.begin(), sorted_source.end()));
  std::sort(sorted_source.begin(), sorted_source.end());
  EXPECT_EQ(with_eos(sorted_source), ex.target);  // same tokens, lines reordered
}

TEST(DenoisingDataset, InvalidOptionsAreErrorsNamingTheField) {
  DenoisingOptions options;
  options.max_source_length = 1;
  try {
    DenoisingDataset(lines_of_lengths({3}), kMask, options);
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_source_length"), std::string::npos) << e.what();
  }
}

TEST(PairDataset, ExamplesAreSourceAndTargetPlusEos) {
  Ragged src, tgt;
  src.push_back(std::vector<int32_t>{10, 11, 12});
  tgt.push_back(std::vector<int32_t>{20, 21});
  PairDataset data(src, tgt, {});
  const Example ex = data.example(0, 5);
  EXPECT_EQ(ex.source, (std::vector<int32_t>{10, 11, 12, kEosId}));
  EXPECT_EQ(ex.target, (std::vector<int32_t>{20, 21, kEosId}));
}

TEST(PairDataset, OverLongSidesAreTruncatedSeparatelyAndCounted) {
  Ragged src = lines_of_lengths({3, 30, 4}), tgt = lines_of_lengths({30, 2, 40});
  PairOptions options;
  options.max_source_length = 8;
  options.max_target_length = 16;
  PairDataset data(src, tgt, options);
  EXPECT_EQ(data.stats().truncated_source, 1);
  EXPECT_EQ(data.stats().truncated_target, 2);
  EXPECT_EQ(data.example(1, 0).source.size(), 8u);
  EXPECT_EQ(data.example(1, 0).source.back(), kEosId);
  EXPECT_EQ(data.example(2, 0).target.size(), 16u);
  EXPECT_EQ(data.example(0, 0).source.size(), 4u);
}

TEST(PairDataset, PairsWithAnEmptySideAreDroppedAndCounted) {
  PairDataset data(lines_of_lengths({3, 0, 2}), lines_of_lengths({1, 4, 0}), {});
  EXPECT_EQ(data.size(), 1u);
  EXPECT_EQ(data.stats().empty_lines, 2);
}

}  // namespace
}  // namespace tarn
