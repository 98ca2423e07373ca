// Kernels written wrong on purpose, and the emulator catching each one: the tests of the
// tests. A conformance suite that passes proves something only if these fail loudly.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "tests/cuda/emu_test_util.h"

namespace tarn::emu::testing {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 128;

// Lines of the faulty statements, recorded by the kernels themselves (same source line), so
// that the tests can check the error names the exact file:line.
std::atomic<int> g_line{0};

std::string at_line() { return "emu_faults_test.cpp:" + std::to_string(g_line); }

// Each thread writes its slot and reads its left neighbour's with no barrier in between. In
// forward order the neighbour has always run first, so the bug hides; reverse and random
// orders expose it (the neighbour's slot still holds the NaN of fresh dynamic shared memory).
template <bool kWithBarrier>
__global__ void neighbour_shift(const float* x, float* out) {
  TARN_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  if (kWithBarrier) __syncthreads();
  out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0.0f;
}

// The same race through static shared memory: stale values from the previous block instead of NaN.
__global__ void neighbour_shift_static(const float* x, float* out) {
  __shared__ float s[kThreads];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0.0f;
}

// A block sum whose shared partials are rewritten by the next call with no barrier first
// (kLeadingBarrier false): a warp that runs ahead into the second call overwrites partials that
// slower warps have not read yet. The emulator lets the first warp in the order run ahead to
// the next barrier, as a warp may on hardware, so the race shows in every order.
template <bool kLeadingBarrier>
__device__ float block_sum_twice_callable(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(kFull, v, m);
  if (kLeadingBarrier) __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < warps; ++w) r += partial[w];
  return r;
}

template <bool kLeadingBarrier>
__global__ void two_block_sums(const float* x, float* out) {
  const float v = x[threadIdx.x];
  const float a = block_sum_twice_callable<kLeadingBarrier>(v);
  const float b = block_sum_twice_callable<kLeadingBarrier>(10.0f * v);
  out[threadIdx.x] = a + b;
}

// Half the block waits at a barrier the other half never reaches.
__global__ void barrier_in_branch(float* out) {
  if (threadIdx.x < 16) { g_line = __LINE__; __syncthreads(); }
  out[threadIdx.x] = 1.0f;
}

// The classic bounds check that returns early, then a barrier: threads past n have exited.
__global__ void early_return_then_barrier(const float* x, float* out, int n) {
  __shared__ float s[kThreads];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s[threadIdx.x] = x[i];
  g_line = __LINE__; __syncthreads();
  out[i] = s[(threadIdx.x + 1) % blockDim.x];
}

// if/else with a barrier on each side: two different barriers.
__global__ void barrier_on_both_sides(float* out) {
  if (threadIdx.x % 2 == 0) {
    g_line = __LINE__; __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 0.0f;
}

// Lanes 0..15 shuffle with the full mask while lanes 16..31 wait at __syncthreads: a hang.
__global__ void shuffle_against_barrier(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) {
    g_line = __LINE__; v = __shfl_xor_sync(kFull, v, 1);
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

// Lane 31 leaves before the warp's shuffle.
__global__ void shuffle_after_lane_exit(int* out) {
  if (threadIdx.x == 31) return;
  int v = threadIdx.x;
  g_line = __LINE__; v += __shfl_down_sync(kFull, v, 1);
  out[threadIdx.x] = v;
}

// Lanes disagree about the mask of one shuffle.
__global__ void shuffle_mask_mismatch(int* out) {
  const unsigned mask = threadIdx.x == 3 ? 0x0000ffffu : kFull;
  g_line = __LINE__; out[threadIdx.x] = __shfl_sync(mask, static_cast<int>(threadIdx.x), 0);
}

// A shuffle whose source lane is outside the mask.
__global__ void shuffle_reads_outside_mask(int* out) {
  if (threadIdx.x < 16) {
    g_line = __LINE__; out[threadIdx.x] = __shfl_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 20);
  }
}

// A ballot in a block of 40 threads with the full mask: lanes 40..63 do not exist.
__global__ void ballot_names_missing_lanes(unsigned* out) {
  g_line = __LINE__; out[threadIdx.x] = __ballot_sync(kFull, 1);
}

// Reads one element past the end of its dynamic shared memory.
__global__ void shared_read_past_end(float* out, int n) {
  TARN_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x + 1];  // the last thread reads s[n]
}

__device__ int recurse(int depth) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(depth);
  return depth == 0 ? pad[0] : recurse(depth - 1) + pad[0];
}
__global__ void overflow_stack(int* out) { out[threadIdx.x] = recurse(1 << 20); }

// Deep frames with locals (their ASan redzones poisoned while the frame lives): the first
// parks every thread but 0 at a barrier inside such a frame (thread 0 returns early, so the
// block fails and its fibers are abandoned there); the second writes every byte of a larger
// frame's array over the same stack range.
__attribute__((noinline)) __device__ void park_in_a_deep_frame(int* out) {
  volatile char pad[2048];
  for (int i = 0; i < 2048; i += 64) pad[i] = static_cast<char>(i);
  __syncthreads();
  out[threadIdx.x] = pad[64];
}
__global__ void abandoned_in_deep_frames(int* out) {
  if (threadIdx.x == 0) return;
  park_in_a_deep_frame(out);
}
__attribute__((noinline)) __device__ int fill_a_deep_frame() {
  volatile char pad[16384];
  for (int i = 0; i < 16384; ++i) pad[i] = static_cast<char>(i);
  int sum = 0;
  for (int i = 0; i < 16384; i += 512) sum += pad[i];
  return sum;
}
__global__ void deep_frames(int* out) { out[threadIdx.x] = fill_a_deep_frame(); }

__global__ void throws_inside(int* out) {
  if (threadIdx.x == 5) throw std::runtime_error("thrown from a kernel body");
  out[threadIdx.x] = 1;
}

// ---------------------------------------------------------------------------------------------

TEST(EmuFaults, MissingBarrierHidesInForwardOrderAndShowsInReverseAndRandom) {
  const int blocks = 3, n = blocks * kThreads;
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1);
  auto wrong = [&](ThreadOrder order, bool barrier) {
    OrderScope o(order);
    out.assign(n, -1.0f);
    if (barrier)
      tarn::launch(neighbour_shift<true>, blocks, kThreads, kThreads * sizeof(float), nullptr, x.data(), out.data());
    else
      tarn::launch(neighbour_shift<false>, blocks, kThreads, kThreads * sizeof(float), nullptr, x.data(), out.data());
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += !(out[i] == (i % kThreads > 0 ? x[i - 1] : 0.0f));
    return bad;
  };
  EXPECT_EQ(wrong(ThreadOrder::forward, false), 0) << "forward order hides this race by construction";
  EXPECT_EQ(wrong(ThreadOrder::reverse, false), blocks * (kThreads - 1));
  EXPECT_GT(wrong(ThreadOrder::random, false), blocks * kThreads / 4);
  for (ThreadOrder order : kAllOrders) EXPECT_EQ(wrong(order, true), 0) << thread_order_name(order);
}

TEST(EmuFaults, MissingBarrierOnStaticSharedMemoryShowsInReverseOrder) {
  const int blocks = 4, n = blocks * kThreads;
  static int call = 0;  // fresh values each call, so that stale ones never match (--gtest_repeat)
  ++call;
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(1000 * call + i);
  OrderScope o(ThreadOrder::reverse);
  tarn::launch(neighbour_shift_static, blocks, kThreads, 0, nullptr, x.data(), out.data());
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += !(out[i] == (i % kThreads > 0 ? x[i - 1] : 0.0f));
  EXPECT_EQ(bad, blocks * (kThreads - 1));
}

TEST(EmuFaults, AWarpRunningAheadRewritesSharedStateOthersStillRead) {
  const int n = 128;
  std::vector<float> x(n), out(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7);
  float sum = 0.0f;
  for (float v : x) sum += v;
  for (ThreadOrder order : kAllOrders) {
    OrderScope o(order);
    tarn::launch(two_block_sums<false>, 1, n, 0, nullptr, x.data(), out.data());
    int bad = 0;
    for (float v : out) bad += v != 11.0f * sum;
    EXPECT_GT(bad, 0) << "the race went unseen in " << thread_order_name(order) << " order";
    tarn::launch(two_block_sums<true>, 1, n, 0, nullptr, x.data(), out.data());
    for (float v : out) EXPECT_EQ(v, 11.0f * sum) << thread_order_name(order);
  }
}

class EmuFaultsEveryOrder : public ::testing::TestWithParam<ThreadOrder> {
 protected:
  OrderScope order_{GetParam()};
};

TEST_P(EmuFaultsEveryOrder, BarrierInABranchIsReportedWithFileAndLine) {
  std::vector<float> out(64);
  const std::string msg = ErrorOf([&] { tarn::launch(barrier_in_branch, 2, 64, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("divergent __syncthreads"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
  EXPECT_NE(msg.find("has exited without reaching it"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emu_faults_test.cpp"), std::string::npos) << "the launch site: " << msg;
}

TEST_P(EmuFaultsEveryOrder, EarlyReturnBeforeABarrierIsReported) {
  const int n = 200;  // the second block has 56 live threads and 72 that returned
  std::vector<float> x(n, 1.0f), out(n);
  const std::string msg =
      ErrorOf([&] { tarn::launch(early_return_then_barrier, 2, kThreads, 0, nullptr, x.data(), out.data(), n); });
  EXPECT_NE(msg.find("block (1,0,0)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
  EXPECT_NE(msg.find("has exited"), std::string::npos) << msg;
  // With n a multiple of the block, no thread returns and the kernel is fine.
  EXPECT_EQ(ErrorOf([&] { tarn::launch(early_return_then_barrier, 1, kThreads, 0, nullptr, x.data(), out.data(), kThreads); }),
            "");
}

TEST_P(EmuFaultsEveryOrder, TwoDifferentBarriersAreReported) {
  std::vector<float> out(64);
  const std::string msg = ErrorOf([&] { tarn::launch(barrier_on_both_sides, 1, 64, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("divergent barriers"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(g_line + 2)), std::string::npos) << "the other barrier's line: " << msg;
}

TEST_P(EmuFaultsEveryOrder, ShuffleAgainstABarrierIsADeadlock) {
  std::vector<int> out(32);
  const std::string msg = ErrorOf([&] { tarn::launch(shuffle_against_barrier, 1, 32, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("__shfl_xor_sync"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
  EXPECT_NE(msg.find("__syncthreads"), std::string::npos) << msg;
}

TEST_P(EmuFaultsEveryOrder, ShuffleWithAnExitedLaneIsReported) {
  std::vector<int> out(32);
  const std::string msg = ErrorOf([&] { tarn::launch(shuffle_after_lane_exit, 1, 32, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("has exited"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
}

TEST_P(EmuFaultsEveryOrder, ShuffleMaskMismatchIsReported) {
  std::vector<int> out(32);
  const std::string msg = ErrorOf([&] { tarn::launch(shuffle_mask_mismatch, 1, 32, 0, nullptr, out.data()); });
  EXPECT_TRUE(msg.find("disagree on a collective's mask") != std::string::npos ||
              msg.find("leaves out its own lane") != std::string::npos)
      << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
}

TEST_P(EmuFaultsEveryOrder, ShuffleFromALaneOutsideTheMaskIsReported) {
  std::vector<int> out(32);
  const std::string msg = ErrorOf([&] { tarn::launch(shuffle_reads_outside_mask, 1, 32, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("not in the mask"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
}

TEST_P(EmuFaultsEveryOrder, FullMaskInAPartialWarpIsReported) {
  std::vector<unsigned> out(40);
  const std::string msg = ErrorOf([&] { tarn::launch(ballot_names_missing_lanes, 1, 40, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("past the block's last thread"), std::string::npos) << msg;
  EXPECT_NE(msg.find(at_line()), std::string::npos) << msg;
}

TEST_P(EmuFaultsEveryOrder, AnExceptionInsideAKernelBecomesALaunchError) {
  std::vector<int> out(32);
  const std::string msg = ErrorOf([&] { tarn::launch(throws_inside, 1, 32, 0, nullptr, out.data()); });
  EXPECT_NE(msg.find("thread (5,0,0) threw: thrown from a kernel body"), std::string::npos) << msg;
  // The emulator is usable after a failed launch.
  EXPECT_EQ(ErrorOf([&] { tarn::launch(barrier_on_both_sides, 1, 1, 0, nullptr, reinterpret_cast<float*>(out.data())); }),
            "");
}

// A fiber's last frames never return, so their ASan poison stays on its stack; the emulator
// clears it before the stack's next use (kernels/emu/fiber.h), from where each fiber last
// left it. Under ASan, stale poison would be reported as a stack-buffer-underflow in the
// second launch; elsewhere this checks that reused stacks run deep frames.
TEST_P(EmuFaultsEveryOrder, StacksOfFinishedAndAbandonedBlocksAreReusedCleanly) {
  std::vector<int> out(64);
  EXPECT_NE(ErrorOf([&] { tarn::launch(abandoned_in_deep_frames, 1, 64, 0, nullptr, out.data()); }), "");
  for (int round = 0; round < 2; ++round) {  // after the abandoned block, then after a finished one
    EXPECT_EQ(ErrorOf([&] { tarn::launch(deep_frames, 1, 64, 0, nullptr, out.data()); }), "");
    int want = 0;
    for (int i = 0; i < 16384; i += 512) want += static_cast<char>(i);
    for (int t = 0; t < 64; ++t) ASSERT_EQ(out[t], want) << "thread " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Orders, EmuFaultsEveryOrder, ::testing::ValuesIn(kAllOrders), OrderName);

// An out-of-bounds shared read: AddressSanitizer stops the program in the sanitizer build (the
// dynamic shared buffer has exactly the launch's size there); elsewhere the NaN bytes around
// the buffer make the read come back NaN.
TEST(EmuFaults, SharedReadPastTheEndIsCaught) {
  const int n = 64;
  std::vector<float> out(n, 0.0f);
#if defined(__SANITIZE_ADDRESS__)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(tarn::launch(shared_read_past_end, 1, n, n * sizeof(float), nullptr, out.data(), n),
               "heap-buffer-overflow");
#else
  tarn::launch(shared_read_past_end, 1, n, n * sizeof(float), nullptr, out.data(), n);
  for (int t = 0; t < n - 1; ++t) EXPECT_EQ(out[t], 1.0f);
  EXPECT_TRUE(std::isnan(out[n - 1])) << "the read past the end gave " << out[n - 1];
#endif
}

// A fiber that overflows its stack hits the guard page below it instead of another fiber's
// stack: the process dies at once.
TEST(EmuFaults, StackOverflowHitsTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int> out(1);
  EXPECT_DEATH(tarn::launch(overflow_stack, 1, 1, 0, nullptr, out.data()), "");
}

}  // namespace
}  // namespace tarn::emu::testing
