// CUDA layout copies (copy_rows, permute, padding_from_lengths) against the CPU kernels: pure data movement, so the
// results must be the CPU's bits. Shapes are no multiple of the 32 x 32 transpose tile.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kernels/layout.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

class LayoutConformance : public Conformance {};

TEST_P(LayoutConformance, CopyRowsIsConcatAndSlice) {
  // Slice columns [5, 5 + 100) of a (37, 129) source into a (37, 211) destination at column 7.
  const int64_t rows = 37, len = 100;
  const auto src = Random(rows * 129, -1.0f, 1.0f, 400);
  std::vector<float> want(rows * 211, -7.0f);
  kernels::cpu::copy_rows(src.data() + 5, 129, want.data() + 7, 211, rows, len);
  auto dsrc = dev(src);
  auto dst = dev(std::vector<float>(rows * 211, -7.0f));
  TARN_ON(target(), copy_rows, dsrc.get() + 5, 129, dst.get() + 7, 211, rows, len);
  EXPECT_TRUE(BitwiseEqual(dst.host(), want));
}

// Padding masks from row lengths (framework/staging.h builds a batch's masks with it): the CPU's
// bits, and the CPU's are the flags a row of `length` tokens then pads gives.
TEST_P(LayoutConformance, PaddingFromLengthsMatchesCpuAndTheFlags) {
  const int64_t rows = 5, cols = 300;  // more positions than a block's threads
  const std::vector<int32_t> lengths = {300, 0, 1, 257, 299};
  std::vector<float> mask(rows * cols, -7.0f), keep(rows * cols, -7.0f);
  kernels::cpu::padding_from_lengths(lengths.data(), rows, cols, mask.data(), keep.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(mask[r * cols + c], c >= lengths[r] ? 1.0f : 0.0f) << r << " " << c;
      ASSERT_EQ(keep[r * cols + c], 1.0f - mask[r * cols + c]) << r << " " << c;
    }
  auto dlengths = dev(lengths);
  auto dmask = dev(std::vector<float>(rows * cols, -7.0f)), dkeep = dev(std::vector<float>(rows * cols, -7.0f));
  TARN_ON(target(), padding_from_lengths, dlengths.get(), rows, cols, dmask.get(), dkeep.get());
  EXPECT_TRUE(BitwiseEqual(dmask.host(), mask));
  EXPECT_TRUE(BitwiseEqual(dkeep.host(), keep));
}

TEST_P(LayoutConformance, PermuteMatchesCpuWhetherOrNotTheInnermostAxisMoves) {
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int> order;
  };
  const Case cases[] = {
      {{37, 129}, {1, 0}},               // a transpose: tiled path
      {{3, 37, 129}, {2, 0, 1}},         // innermost to the front, batch of 1
      {{5, 7, 37, 9}, {0, 2, 1, 3}},     // (B,N,H,d) -> (B,H,N,d): the innermost stays
      {{2, 37, 3, 33}, {0, 3, 2, 1}},    // innermost moves with two batch axes
      {{4, 1, 65}, {2, 1, 0}},           // an extent-1 axis
      {{6, 5, 4}, {0, 1, 2}},            // the identity
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
  };
  int index = 0;
  for (const Case& c : cases) {
    const int ndim = static_cast<int>(c.shape.size());
    int64_t numel = 1;
    for (int64_t e : c.shape) numel *= e;
    std::vector<float> src(numel);
    std::iota(src.begin(), src.end(), 0.0f);  // every element distinct: a misplaced one shows
    std::vector<float> want(numel);
    kernels::cpu::permute(src.data(), want.data(), c.shape.data(), c.order.data(), ndim);
    auto dsrc = dev(src);
    auto got = out(numel);
    TARN_ON(target(), permute, dsrc.get(), got.get(), c.shape.data(), c.order.data(), ndim);
    EXPECT_TRUE(BitwiseEqual(got.host(), want)) << "case " << index;
    ++index;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, LayoutConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
