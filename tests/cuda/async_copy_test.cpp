// kernels/cuda/async_copy.cuh (cp.async) and warp_mma.cuh's ldmatrix on the emulator: the rules a
// kernel must keep to be right on a GPU, enforced so that breaking one fails here, under each
// thread order: a copy is not visible before its wait_group; wait_group N leaves the N most
// recent groups in flight; a copy issued into a buffer other warps still read clobbers it;
// zero fill; and the misuses that throw (misaligned addresses, a thread ending with copies in
// flight).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/warp_mma.cuh"
#include "tests/cuda/emu_test_util.h"

namespace tarn::emu::testing {
namespace {

namespace async = ::tarn::kernels::cuda_emu::async;
namespace wm = ::tarn::kernels::cuda_emu::warp_mma;

constexpr int kThreads = 64;
constexpr int kFloats = 4 * kThreads;  // one 16-byte copy a thread

// What each thread sees of shared memory at three points, for two groups of copies (buffer x in
// the first group, y in the second): before any wait, after wait<1> (x's group only) and after
// wait<0>. Each thread reads its own 16 bytes (its own copies: no barrier needed) and, after a
// barrier, its neighbour's.
__global__ void two_groups(const float* x, const float* y, float* seen) {
  __align__(16) __shared__ float xs[kFloats];
  __align__(16) __shared__ float ys[kFloats];
  const int t = threadIdx.x, mine = 4 * t, theirs = 4 * ((t + 1) % kThreads);
  async::copy16(xs + mine, x + mine);
  async::commit();
  async::copy16(ys + mine, y + mine);
  async::commit();
  float* out = seen + t * 5;
  out[0] = xs[mine];  // in flight
  async::wait<1>();
  out[1] = xs[mine];  // complete
  out[2] = ys[mine];  // still in flight
  async::wait<0>();
  out[3] = ys[mine];
  __syncthreads();
  out[4] = xs[theirs];  // the neighbour's copy, after its wait and a barrier
}

class AsyncCopy : public ::testing::TestWithParam<ThreadOrder> {};

TEST_P(AsyncCopy, DataAppearsAtItsWaitGroupOldestGroupFirst) {
  OrderScope order(GetParam());
  std::vector<float> x(kFloats), y(kFloats), seen(5 * kThreads, 0.0f);
  std::iota(x.begin(), x.end(), 1.0f);
  std::iota(y.begin(), y.end(), 1000.0f);
  tarn::launch(two_groups, 1, kThreads, 0, nullptr, x.data(), y.data(), seen.data());
  for (int t = 0; t < kThreads; ++t) {
    const float* s = seen.data() + 5 * t;
    EXPECT_TRUE(std::isnan(s[0])) << "thread " << t << " read its copy before any wait";
    EXPECT_EQ(s[1], x[4 * t]) << t;
    EXPECT_TRUE(std::isnan(s[2])) << "thread " << t << ": wait<1> must leave the newest group in flight";
    EXPECT_EQ(s[3], y[4 * t]) << t;
    EXPECT_EQ(s[4], x[4 * ((t + 1) % kThreads)]) << t;
  }
}

// A double-buffered loop that issues the next tile's copy into the buffer the other warps are
// still reading, without the barrier that must come first: some thread reads NaN. The same loop
// with the barrier is right.
template <bool kBarrierBeforeRefill>
__global__ void pipeline(const float* in, int tiles, float* sums) {
  __align__(16) __shared__ float buf[2][kFloats];
  const int t = threadIdx.x;
  async::copy16(buf[0] + 4 * t, in + 4 * t);
  async::commit();
  float sum = 0.0f;
  for (int i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      if (kBarrierBeforeRefill) __syncthreads();  // every warp is done with tile i - 1's buffer
      async::copy16(buf[(i + 1) % 2] + 4 * t, in + (i + 1) * kFloats + 4 * t);
    }
    async::commit();
    async::wait<1>();  // tile i is here (for this thread's copies)
    __syncthreads();   // ... and every other thread's
    for (int j = 0; j < kFloats; j += 37) sum += buf[i % 2][(j + 4 * t) % kFloats];
  }
  async::wait_all();
  sums[t] = sum;
}

TEST_P(AsyncCopy, RefillingABufferOthersStillReadShowsAsNaN) {
  OrderScope order(GetParam());
  const int tiles = 4;
  std::vector<float> in(tiles * kFloats);
  std::iota(in.begin(), in.end(), 0.0f);
  std::vector<float> good(kThreads), bad(kThreads);
  tarn::launch(pipeline<true>, 1, kThreads, 0, nullptr, in.data(), tiles, good.data());
  for (int t = 0; t < kThreads; ++t) {
    float want = 0.0f;
    for (int i = 0; i < tiles; ++i)
      for (int j = 0; j < kFloats; j += 37) want += in[i * kFloats + (j + 4 * t) % kFloats];
    EXPECT_EQ(good[t], want) << t;
  }
  // Without the barrier a warp that runs ahead refills the buffer under the other: in forward
  // order warp 0 runs ahead, in reverse warp 1; either way somebody reads poison.
  if (GetParam() == ThreadOrder::random) GTEST_SKIP() << "a random order may happen to interleave harmlessly";
  tarn::launch(pipeline<false>, 1, kThreads, 0, nullptr, in.data(), tiles, bad.data());
  bool any_nan = false;
  for (float s : bad) any_nan = any_nan || std::isnan(s);
  EXPECT_TRUE(any_nan) << "a refill before the barrier went unnoticed";
}

__global__ void zero_fill(const float* in, float* out) {
  __align__(16) __shared__ float s[8];
  if (threadIdx.x < 2) async::copy16_or_zero(s + 4 * threadIdx.x, in, threadIdx.x == 0);
  async::wait_all();
  __syncthreads();
  if (threadIdx.x < 8) out[threadIdx.x] = s[threadIdx.x];
}

TEST_P(AsyncCopy, AZeroSourceSizeFillsWithZeros) {
  OrderScope order(GetParam());
  const std::vector<float> in = {1, 2, 3, 4};
  std::vector<float> out(8, -1.0f);
  tarn::launch(zero_fill, 1, 32, 0, nullptr, in.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 0, 0, 0, 0}));
}

__global__ void exits_in_flight(const float* in) {
  __align__(16) __shared__ float s[4 * 32];
  async::copy16(s + 4 * threadIdx.x, in + 4 * threadIdx.x);
  async::commit();
}

__global__ void misaligned_copy(const float* in) {
  __align__(16) __shared__ float s[8];
  async::copy16(s + 1, in);
  async::wait_all();
}

__global__ void misaligned_ldmatrix(int offset) {
  __align__(16) __shared__ uint16_t s[16 * 16 + 8];
  for (int i = threadIdx.x; i < 16 * 16 + 8; i += 32) s[i] = 0;
  __syncwarp();
  uint32_t r[4];
  wm::ldmatrix_x4(r, s + offset + (threadIdx.x % 16) * 16 + 8 * (threadIdx.x / 16));
}

TEST_P(AsyncCopy, MisusesThrowNamingTheCallSite) {
  OrderScope order(GetParam());
  std::vector<float> in(4 * 32, 1.0f);
  const std::string in_flight = ErrorOf([&] { tarn::launch(exits_in_flight, 1, 32, 0, nullptr, in.data()); });
  EXPECT_NE(in_flight.find("not waited for"), std::string::npos) << in_flight;
  EXPECT_NE(in_flight.find("async_copy_test.cpp"), std::string::npos) << in_flight;
  const std::string misaligned = ErrorOf([&] { tarn::launch(misaligned_copy, 1, 32, 0, nullptr, in.data()); });
  EXPECT_NE(misaligned.find("aligned"), std::string::npos) << misaligned;
  EXPECT_EQ(ErrorOf([&] { tarn::launch(misaligned_ldmatrix, 1, 32, 0, nullptr, 0); }), "");
  const std::string ld = ErrorOf([&] { tarn::launch(misaligned_ldmatrix, 1, 32, 0, nullptr, 4); });
  EXPECT_NE(ld.find("not 16-byte aligned"), std::string::npos) << ld;
}

INSTANTIATE_TEST_SUITE_P(Orders, AsyncCopy, ::testing::ValuesIn(kAllOrders), OrderName);

}  // namespace
}  // namespace tarn::emu::testing
