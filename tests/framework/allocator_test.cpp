#include <gtest/gtest.h>

#include "framework/allocator.h"
#include "framework/tensor.h"

namespace tarn {
namespace {

TEST(Allocator, PeakBytesAfterAKnownSequence) {
  Allocator& a = allocator_for(Device::cpu());
  const int64_t base = a.stats().current_bytes;
  a.reset_peak();
  const int64_t kb = static_cast<int64_t>(a.rounded_size(1000 * sizeof(float)));
  {
    Tensor x = Tensor::empty({1000});
    Tensor y = Tensor::empty({1000});
    EXPECT_EQ(a.stats().current_bytes - base, 2 * kb);
  }  // both freed
  EXPECT_EQ(a.stats().current_bytes, base);
  { Tensor z = Tensor::empty({1000}); }
  Tensor big = Tensor::empty({3000});
  const int64_t kbig = static_cast<int64_t>(a.rounded_size(3000 * sizeof(float)));
  EXPECT_EQ(a.stats().peak_bytes - base, std::max(2 * kb, kbig));
  EXPECT_EQ(a.stats().current_bytes - base, kbig);
}

TEST(Allocator, ReusesCachedBlocksOfTheSameSize) {
  Allocator& a = allocator_for(Device::cpu());
  void* first;
  {
    Tensor x = Tensor::empty({12345});
    first = x.data<float>();
  }
  Tensor y = Tensor::empty({12345});
  EXPECT_EQ(y.data<float>(), first);
  EXPECT_GT(a.stats().allocations, 0);
}

TEST(Allocator, BlocksAreAlignedTo64Bytes) {
  for (int n : {1, 3, 17, 1000, 100003}) {
    Tensor t = Tensor::empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % 64, 0u) << n;
  }
}

TEST(Allocator, ViewsDoNotAllocate) {
  Tensor t = Tensor::empty({64, 64});
  const int64_t before = memory_stats().current_bytes;
  Tensor v = t.view({4096}).narrow0(0, 100);
  EXPECT_EQ(memory_stats().current_bytes, before);
}

}  // namespace
}  // namespace tarn
