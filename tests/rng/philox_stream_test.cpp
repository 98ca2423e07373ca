// The Philox generator as a stream: position bookkeeping (offset, skip, save/restore) and the
// equivalence of the sequential generator with the stateless philox_at.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "framework/rng.h"

namespace tarn {
namespace {

std::vector<uint32_t> draw(Philox& rng, int n) {
  std::vector<uint32_t> out(n);
  for (auto& x : out) x = rng.next_u32();
  return out;
}

TEST(PhiloxStream, PhiloxAtEqualsTheSequentialGenerator) {
  for (uint64_t stream : {0ull, 1ull, 0x1234567890ull}) {
    Philox rng(42, stream);
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(rng.next_u32(), philox_at(42, stream, i)) << "index " << i;
  }
}

TEST(PhiloxStream, StartingAtAnOffsetEqualsSkippingTo) {
  for (uint64_t offset : {0ull, 1ull, 3ull, 4ull, 5ull, 1001ull}) {
    Philox direct(7, 3, offset);
    Philox skipped(7, 3);
    skipped.skip(offset);
    for (uint64_t i = 0; i < 20; ++i) {
      const uint32_t want = philox_at(7, 3, offset + i);
      ASSERT_EQ(direct.next_u32(), want) << "offset " << offset << " i " << i;
      ASSERT_EQ(skipped.next_u32(), want) << "offset " << offset << " i " << i;
    }
  }
}

// skip() from every phase within a block and by every small distance, interleaved with draws:
// the cached block must be dropped exactly when the position leaves it.
TEST(PhiloxStream, SkipFromAnyPhaseLandsOnTheRightOutput) {
  for (uint64_t start = 0; start < 8; ++start) {
    for (uint64_t n = 0; n < 10; ++n) {
      Philox rng(5, 9, start);
      EXPECT_EQ(rng.next_u32(), philox_at(5, 9, start));
      rng.skip(n);
      EXPECT_EQ(rng.next_u32(), philox_at(5, 9, start + 1 + n)) << "start " << start << " skip " << n;
      EXPECT_EQ(rng.state().offset, start + 2 + n);
    }
  }
}

TEST(PhiloxStream, SavedStateContinuesTheSameStream) {
  Philox rng(1234, 2);
  draw(rng, 13);  // mid-block, so the restore must not reuse a stale block
  rng.normal();
  const RngState saved = rng.state();
  const std::vector<uint32_t> expected = draw(rng, 50);

  Philox restored(saved);
  EXPECT_EQ(draw(restored, 50), expected);

  Philox reused(99, 99);
  draw(reused, 3);  // leaves a cached block that set_state must invalidate
  reused.set_state(saved);
  EXPECT_EQ(draw(reused, 50), expected);
}

TEST(PhiloxStream, StateCountsOutputsConsumed) {
  Philox rng(3, 4, 10);
  rng.next_u32();
  rng.uniform();
  rng.normal();  // two outputs
  rng.below(10);
  const RngState s = rng.state();
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.stream, 4u);
  EXPECT_EQ(s.offset, 15u);
}

TEST(PhiloxStream, DifferentStreamsAndSeedsGiveDifferentSequences) {
  Philox a(42, 0), b(42, 1), c(43, 0), d(42, uint64_t{1} << 32);
  const auto va = draw(a, 64), vb = draw(b, 64), vc = draw(c, 64), vd = draw(d, 64);
  EXPECT_NE(va, vb);
  EXPECT_NE(va, vc);
  EXPECT_NE(va, vd);  // the stream's high word matters too
  EXPECT_NE(vb, vd);
  // And not merely shifted copies of each other: no shared 32-bit values at all is expected
  // for 256 draws out of 2^32 (collision chance ~ 1e-5).
  std::set<uint32_t> all;
  for (const auto* v : {&va, &vb, &vc, &vd}) all.insert(v->begin(), v->end());
  EXPECT_EQ(all.size(), 4u * 64u);
}

TEST(PhiloxStream, BlockHighWordIsPartOfTheCounter) {
  // Outputs 2^34 apart differ only in the block's high word: they must not repeat.
  const uint64_t far = uint64_t{4} << 32;
  for (uint64_t i = 0; i < 4; ++i) EXPECT_NE(philox_at(1, 0, i), philox_at(1, 0, far + i));
}

}  // namespace
}  // namespace tarn
