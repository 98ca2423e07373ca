#include "data/batch.h"

#include <gtest/gtest.h>

#include "data/special_ids.h"
#include "kernels/check.h"

namespace tarn {
namespace {

TEST(MakeBatch, PadsSourcesAndShiftsTargetsRightStartingWithEos) {
  const std::vector<int32_t> s0 = {10, 11, 12, kEosId}, s1 = {13, kEosId};
  const std::vector<int32_t> t0 = {20, kEosId}, t1 = {21, 22, 23, kEosId};
  const Batch b = make_batch({{s0.data(), s0.size()}, {s1.data(), s1.size()}},
                             {{t0.data(), t0.size()}, {t1.data(), t1.size()}});
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.src_len, 4);
  EXPECT_EQ(b.tgt_len, 4);
  EXPECT_EQ(b.src_ids, (std::vector<int32_t>{10, 11, 12, kEosId, 13, kEosId, kPadId, kPadId}));
  EXPECT_EQ(b.src_mask, (std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(b.src_lengths, (std::vector<int32_t>{4, 2}));
  EXPECT_EQ(b.tgt_labels, (std::vector<int32_t>{20, kEosId, kIgnoreIndex, kIgnoreIndex, 21, 22, 23, kEosId}));
  EXPECT_EQ(b.tgt_input_ids, (std::vector<int32_t>{kEosId, 20, kPadId, kPadId, kEosId, 21, 22, 23}));
  EXPECT_EQ(b.tgt_mask, (std::vector<float>{1, 1, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(b.tgt_lengths, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(b.src_tokens(), 6);
  EXPECT_EQ(b.tgt_tokens(), 6);
}

TEST(MakeBatch, EmptyRowsOrMismatchedCountsAreErrors) {
  const std::vector<int32_t> s = {5, kEosId};
  EXPECT_THROW(make_batch({}, {}), Error);
  EXPECT_THROW(make_batch({{s.data(), s.size()}}, {}), Error);
  EXPECT_THROW(make_batch({{s.data(), s.size()}}, {{s.data(), 0}}), Error);
}

}  // namespace
}  // namespace tarn
