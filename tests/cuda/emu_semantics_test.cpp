// The emulator itself, on correct kernels: indices, shared memory and barriers, warp shuffles
// and votes, atomics across blocks, the runtime stand-ins and launch checks. Every kernel runs
// under each thread order and must give the same, right answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.cuh"
#include "tests/cuda/emu_test_util.h"

namespace tarn::emu::testing {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Kernels.

// out[global linear id] = packed (threadIdx, blockIdx, blockDim, gridDim) checks.
__global__ void write_indices(int* out, int* bad) {
  const unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const unsigned bx = blockIdx.x, by = blockIdx.y, bz = blockIdx.z;
  const unsigned t = tx + blockDim.x * (ty + blockDim.y * tz);
  const unsigned b = bx + gridDim.x * (by + gridDim.y * bz);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  if (tx >= blockDim.x || ty >= blockDim.y || tz >= blockDim.z || bx >= gridDim.x || by >= gridDim.y ||
      bz >= gridDim.z)
    atomicAdd(bad, 1);
  atomicAdd(&out[b * per_block + t], 1);
}

// Tree reduction in static shared memory: the textbook kernel with a barrier per level.
constexpr int kReduceThreads = 256;
__global__ void block_sum_static(const float* x, float* out, int n) {
  __shared__ float s[kReduceThreads];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// The same through dynamic shared memory sized at launch.
__global__ void block_sum_dynamic(const float* x, float* out, int n) {
  TARN_DYNAMIC_SHARED(float, s);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Reads dynamic shared memory before anything wrote it.
__global__ void read_fresh_dynamic(float* out) {
  TARN_DYNAMIC_SHARED(float, s);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}

// Warp sums by butterfly (xor) and by halving (down); inclusive scan by up; broadcast by idx.
__global__ void warp_ops(const int* x, int* xor_sum, int* down_sum, int* scan, int* bcast) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % warpSize;
  int v = x[i];
  int a = v;
  for (int m = 16; m > 0; m /= 2) a += __shfl_xor_sync(kFull, a, m);
  xor_sum[i] = a;
  int d = v;
  for (int off = 16; off > 0; off /= 2) d += __shfl_down_sync(kFull, d, off);
  down_sum[i] = d;  // lane 0 holds the warp's sum, other lanes partial sums
  int s = v;
  for (int off = 1; off < 32; off *= 2) {
    const int up = __shfl_up_sync(kFull, s, off);
    if (lane >= off) s += up;
  }
  scan[i] = s;
  bcast[i] = __shfl_sync(kFull, v, 7);
}

// Shuffles within 8-lane segments (width 8): sums of each segment, and a rotate within it.
__global__ void segment_ops(const float* x, float* seg_sum, float* rotated) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  float a = v;
  for (int m = 4; m > 0; m /= 2) a += __shfl_xor_sync(kFull, a, m, 8);
  seg_sum[i] = a;
  rotated[i] = __shfl_sync(kFull, v, static_cast<int>(threadIdx.x) + 1, 8);
}

__global__ void shuffle_double(const double* x, double* out) {
  const int i = threadIdx.x;
  out[i] = __shfl_xor_sync(kFull, x[i], 1);
}

__global__ void votes(const int* pred, unsigned* ballot, int* any, int* all) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int p = pred[i];
  ballot[i] = __ballot_sync(kFull, p);
  any[i] = __any_sync(kFull, p);
  all[i] = __all_sync(kFull, p);
}

// Two half-warps shuffle with disjoint masks at the same time.
__global__ void half_warp_masks(const int* x, int* out) {
  const int lane = threadIdx.x;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int v = x[lane];
  for (int m = 8; m > 0; m /= 2) v += __shfl_xor_sync(mask, v, m);
  out[lane] = v;
}

// __syncwarp orders a shared-memory exchange inside one warp.
__global__ void syncwarp_exchange(const int* x, int* out) {
  __shared__ int s[32];
  const int lane = threadIdx.x;
  s[lane] = x[lane];
  __syncwarp();
  out[lane] = s[31 - lane];
}

__global__ void barrier_reductions(const int* pred, int* count, int* all, int* any) {
  const int p = pred[threadIdx.x];
  const int c = __syncthreads_count(p);
  const int a = __syncthreads_and(p);
  const int o = __syncthreads_or(p);
  if (threadIdx.x == 0) {
    *count = c;
    *all = a;
    *any = o;
  }
}

__global__ void atomics_across_blocks(const float* x, int n, int* count, float* fsum, int* imax, float* fmax,
                                      unsigned long long* usum) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(count, 1);
  atomicAdd(fsum, 1.0f);
  atomicMax(imax, i);
  kernels::cuda_emu::device::atomic_max(fmax, x[i]);  // kernels/cuda/common.cuh
  atomicAdd(usum, static_cast<unsigned long long>(i));
}

// Records the order in which a block's threads first ran.
__global__ void record_order(int* first_seen) {
  __shared__ int next;
  if (threadIdx.x == 0) next = 0;
  __syncthreads();
  first_seen[threadIdx.x] = atomicAdd(&next, 1);
}

__global__ void many_barriers(int* out, int rounds) {
  __shared__ int s[1024];
  int v = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    s[threadIdx.x] = v;
    __syncthreads();
    v = s[(threadIdx.x + 1) % blockDim.x];
    __syncthreads();
  }
  out[threadIdx.x] = v;
}

__global__ void args_by_value(int a, float b, const int* p, int* out) { out[threadIdx.x] = a + static_cast<int>(b) + p[0]; }

// ---------------------------------------------------------------------------------------------
// Tests.

class EmuSemantics : public ::testing::TestWithParam<ThreadOrder> {
 protected:
  OrderScope order_{GetParam()};
};

TEST_P(EmuSemantics, IndicesCoverA3dGridOnceEach) {
  const dim3 grid(3, 2, 2), block(5, 4, 3);
  const int total = 3 * 2 * 2 * 5 * 4 * 3;
  std::vector<int> out(total, 0);
  int bad = 0;
  tarn::launch(write_indices, grid, block, 0, nullptr, out.data(), &bad);
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](int v) { return v == 1; }));
}

TEST_P(EmuSemantics, SharedMemoryTreeReductionsMatchTheSum) {
  const int n = 1000, blocks = (n + kReduceThreads - 1) / kReduceThreads;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 17);
  std::vector<float> a(blocks, -1.0f), b(blocks, -1.0f);
  tarn::launch(block_sum_static, blocks, kReduceThreads, 0, nullptr, x.data(), a.data(), n);
  tarn::launch(block_sum_dynamic, blocks, kReduceThreads, kReduceThreads * sizeof(float), nullptr, x.data(), b.data(), n);
  for (int blk = 0; blk < blocks; ++blk) {
    float want = 0.0f;
    for (int i = blk * kReduceThreads; i < std::min(n, (blk + 1) * kReduceThreads); ++i) want += x[i];
    EXPECT_EQ(a[blk], want) << "block " << blk;
    EXPECT_EQ(b[blk], want) << "block " << blk;
  }
}

TEST_P(EmuSemantics, DynamicSharedMemoryStartsAsNaN) {
  std::vector<float> out(2 * 64, 0.0f);
  tarn::launch(read_fresh_dynamic, 2, 64, 64 * sizeof(float), nullptr, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

TEST_P(EmuSemantics, WarpShufflesFollowShflSyncRules) {
  const int n = 64;
  std::vector<int> x(n), xs(n), ds(n), sc(n), bc(n);
  for (int i = 0; i < n; ++i) x[i] = (i * 7) % 11 - 3;
  tarn::launch(warp_ops, 1, n, 0, nullptr, x.data(), xs.data(), ds.data(), sc.data(), bc.data());
  for (int w = 0; w < n / 32; ++w) {
    int sum = 0, prefix = 0;
    for (int l = 0; l < 32; ++l) sum += x[w * 32 + l];
    for (int l = 0; l < 32; ++l) {
      const int i = w * 32 + l;
      prefix += x[i];
      EXPECT_EQ(xs[i], sum) << i;
      EXPECT_EQ(sc[i], prefix) << i;
      EXPECT_EQ(bc[i], x[w * 32 + 7]) << i;
      // shfl_down: lanes past the end keep their own value, so lane l sums x[l..] in a tree.
      int want_down = x[i];
      {
        std::vector<int> v(x.begin() + w * 32, x.begin() + w * 32 + 32);
        for (int off = 16; off > 0; off /= 2) {
          std::vector<int> nv = v;
          for (int k = 0; k < 32; ++k) nv[k] = v[k] + (k + off < 32 ? v[k + off] : v[k]);
          v = nv;
        }
        want_down = v[l];
      }
      EXPECT_EQ(ds[i], want_down) << i;
    }
  }
}

TEST_P(EmuSemantics, ShufflesRespectWidthSegments) {
  std::vector<float> x(32), sum(32), rot(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i * i % 13);
  tarn::launch(segment_ops, 1, 32, 0, nullptr, x.data(), sum.data(), rot.data());
  for (int i = 0; i < 32; ++i) {
    const int seg = i / 8 * 8;
    float want = 0.0f;
    for (int k = 0; k < 8; ++k) want += x[seg + k];
    EXPECT_EQ(sum[i], want) << i;
    EXPECT_EQ(rot[i], x[seg + (i + 1) % 8]) << i;
  }
}

TEST_P(EmuSemantics, ShufflesCarryEightByteValues) {
  std::vector<double> x(32), out(32);
  for (int i = 0; i < 32; ++i) x[i] = 1e300 / (i + 1);
  tarn::launch(shuffle_double, 1, 32, 0, nullptr, x.data(), out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], x[i ^ 1]);
}

TEST_P(EmuSemantics, VotesSeeEveryLaneOfTheMask) {
  const int n = 96;
  std::vector<int> p(n, 0), any(n), all(n);
  std::vector<unsigned> ballot(n);
  for (int i = 0; i < 32; ++i) p[i] = i % 3 == 0;  // warp 0: some
  for (int i = 32; i < 64; ++i) p[i] = 1;          // warp 1: all
  tarn::launch(votes, 1, n, 0, nullptr, p.data(), ballot.data(), any.data(), all.data());  // warp 2: none
  for (int w = 0; w < 3; ++w) {
    unsigned want = 0;
    for (int l = 0; l < 32; ++l) want |= static_cast<unsigned>(p[w * 32 + l] != 0) << l;
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(ballot[w * 32 + l], want);
      EXPECT_EQ(any[w * 32 + l], want != 0);
      EXPECT_EQ(all[w * 32 + l], want == kFull);
    }
  }
}

TEST_P(EmuSemantics, DisjointMasksResolveSeparately) {
  std::vector<int> x(32), out(32);
  std::iota(x.begin(), x.end(), 1);
  tarn::launch(half_warp_masks, 1, 32, 0, nullptr, x.data(), out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], i < 16 ? 136 : 392) << i;
}

TEST_P(EmuSemantics, SyncwarpOrdersAnExchangeInsideAWarp) {
  std::vector<int> x(32), out(32);
  std::iota(x.begin(), x.end(), 100);
  tarn::launch(syncwarp_exchange, 1, 32, 0, nullptr, x.data(), out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], x[31 - i]);
}

TEST_P(EmuSemantics, SyncthreadsCountAndOrReduceOverTheBlock) {
  std::vector<int> p(128, 0);
  for (int i = 0; i < 128; i += 5) p[i] = 1;
  int count = -1, all = -1, any = -1;
  tarn::launch(barrier_reductions, 1, 128, 0, nullptr, p.data(), &count, &all, &any);
  EXPECT_EQ(count, 26);
  EXPECT_EQ(all, 0);
  EXPECT_EQ(any, 1);
}

TEST_P(EmuSemantics, AtomicsAreAtomicAcrossBlocksOnSeveralWorkers) {
  const int n = 20000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i)) * 100.0f;
  int count = 0, imax = -1;
  float fsum = 0.0f, fmax = -1e30f;
  unsigned long long usum = 0;
  tarn::launch(atomics_across_blocks, (n + 127) / 128, 128, 0, nullptr, x.data(), n, &count, &fsum, &imax, &fmax, &usum);
  EXPECT_EQ(count, n);
  EXPECT_EQ(fsum, static_cast<float>(n));  // exact: integers below 2^24
  EXPECT_EQ(imax, n - 1);
  EXPECT_EQ(fmax, *std::max_element(x.begin(), x.end()));
  EXPECT_EQ(usum, static_cast<unsigned long long>(n) * (n - 1) / 2);
}

TEST_P(EmuSemantics, ArgumentsArePassedByValue) {
  int p = 5;
  std::vector<int> out(4);
  tarn::launch(args_by_value, 1, 4, 0, nullptr, 1, 2.5f, &p, out.data());
  for (int v : out) EXPECT_EQ(v, 8);
}

TEST_P(EmuSemantics, ManyBarriersInAFullBlock) {
  const int rounds = 50;
  std::vector<int> out(1024);
  tarn::launch(many_barriers, 1, 1024, 0, nullptr, out.data(), rounds);
  for (int t = 0; t < 1024; ++t) EXPECT_EQ(out[t], (t + rounds) % 1024);
}

INSTANTIATE_TEST_SUITE_P(Orders, EmuSemantics, ::testing::ValuesIn(kAllOrders), OrderName);

// ---------------------------------------------------------------------------------------------

TEST(EmuOrder, ForwardAndReverseRunThreadsInIndexOrder) {
  std::vector<int> seen(64);
  {
    OrderScope o(ThreadOrder::forward);
    tarn::launch(record_order, 1, 64, 0, nullptr, seen.data());
  }
  for (int t = 0; t < 64; ++t) EXPECT_EQ(seen[t], t);
  {
    OrderScope o(ThreadOrder::reverse);
    tarn::launch(record_order, 1, 64, 0, nullptr, seen.data());
  }
  for (int t = 0; t < 64; ++t) EXPECT_EQ(seen[t], 63 - t);
}

TEST(EmuOrder, RandomOrderIsAPermutationReproducibleFromItsSeed) {
  OrderScope o(ThreadOrder::random);
  const uint64_t saved_seed = seed();
  auto run = [](uint64_t seed) {
    set_seed(seed);
    std::vector<int> seen(256);
    tarn::launch(record_order, 1, 256, 0, nullptr, seen.data());
    return seen;
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int t = 0; t < 256; ++t) EXPECT_EQ(sorted[t], t);
  int in_place = 0;
  for (int t = 0; t < 256; ++t) in_place += a[t] == t;
  EXPECT_LT(in_place, 32);
  set_seed(saved_seed);
}

TEST(EmuRuntime, MemoryCallsBehaveLikeTheRealRuntime) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 100 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
  std::vector<float> h(100, 3.0f), back(100, 0.0f);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 100 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), d, 100 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
  EXPECT_EQ(cudaMemset(d, 0, 100 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), d, 100 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, std::vector<float>(100, 0.0f));
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  cudaStream_t s;
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e0, s), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(e1, s), cudaSuccess);
  float ms = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  int n = 0;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Work in flight (set_completion_polls): queries answer cudaErrorNotReady, which also becomes
// the thread's last error, as CUDA's do, until the work is done or synchronised.
TEST(EmuRuntime, QueriesOfWorkInFlightAreNotReadyAndLeaveItAsTheLastError) {
  const int saved = completion_polls();
  set_completion_polls(2);
  cudaStream_t s;
  cudaEvent_t e;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // done after two polls
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  // The stream's work: a query counts down the same way; a synchronize completes it at once.
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);  // the default stream is cudaStreamLegacy
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady);
  set_completion_polls(0);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  set_completion_polls(saved);
}

// tarn::launch checks the thread's last error after the launch, as on hardware: an error some
// earlier call left unread fails the next launch (which is why pollers must clear
// cudaErrorNotReady), and the check clears it.
TEST(EmuLaunch, AnErrorLeftUnreadFailsTheNextLaunchsCheck) {
  std::vector<float> x(256, 1.0f), out(1, 0.0f);
  const auto run = [&] { tarn::launch(block_sum_dynamic, 1, 256, 256 * sizeof(float), nullptr, x.data(), out.data(), 256); };
  EXPECT_EQ(cudaSetDevice(7), cudaErrorInvalidDevice);
  const std::string msg = ErrorOf(run);
  EXPECT_NE(msg.find("invalid device ordinal"), std::string::npos) << msg;
  EXPECT_EQ(out[0], 256.0f) << "the kernel itself ran";
  EXPECT_EQ(ErrorOf(run), "");
}

// A fault is sticky: every later call and launch fails with it, cudaGetLastError does not clear
// it, and no kernel runs, until cudaDeviceReset.
TEST(EmuRuntime, AStickyFaultFailsEveryCallAndLaunchUntilTheDeviceIsReset) {
  std::vector<float> x(256, 1.0f), out(1, -1.0f);
  const auto run = [&] { tarn::launch(block_sum_dynamic, 1, 256, 256 * sizeof(float), nullptr, x.data(), out.data(), 256); };
  fault_device(cudaErrorIllegalAddress);
  EXPECT_EQ(device_fault(), cudaErrorIllegalAddress);
  float* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 64), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  const std::string msg = ErrorOf(run);
  EXPECT_NE(msg.find("an illegal memory access was encountered"), std::string::npos) << msg;
  EXPECT_EQ(out[0], -1.0f) << "a faulted device ran a kernel";
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(ErrorOf(run), "");
  EXPECT_EQ(out[0], 256.0f);
}

TEST(EmuLaunch, InvalidConfigurationsThrowLikeTheHardwareRejectsThem) {
  std::vector<float> x(4096), out(4096);
  auto msg = ErrorOf([&] { tarn::launch(block_sum_dynamic, 0, 256, 1024, nullptr, x.data(), out.data(), 1); });
  EXPECT_NE(msg.find("grid extent is 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("emu_semantics_test.cpp:"), std::string::npos) << msg;
  msg = ErrorOf([&] { tarn::launch(block_sum_dynamic, 1, 2048, 1024, nullptr, x.data(), out.data(), 1); });
  EXPECT_NE(msg.find("block exceeds"), std::string::npos) << msg;
  msg = ErrorOf([&] { tarn::launch(block_sum_dynamic, 1, dim3(32, 32, 2), 1024, nullptr, x.data(), out.data(), 1); });
  EXPECT_NE(msg.find("more than 1024 threads"), std::string::npos) << msg;
  // Above 48 KiB of dynamic shared memory a kernel must opt in, as on hardware.
  msg = ErrorOf([&] { tarn::launch(read_fresh_dynamic, 1, 32, 64 * 1024, nullptr, out.data()); });
  EXPECT_NE(msg.find("cudaFuncSetAttribute"), std::string::npos) << msg;
  ASSERT_EQ(cudaFuncSetAttribute(read_fresh_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  EXPECT_EQ(ErrorOf([&] { tarn::launch(read_fresh_dynamic, 1, 32, 64 * 1024, nullptr, out.data()); }), "");
}

TEST(EmuLaunch, CollectivesOutsideAKernelThrow) {
  EXPECT_THROW(__syncthreads(), std::exception);
  EXPECT_THROW(__shfl_sync(kFull, 1, 0), std::exception);
}

// Not a pass/fail property but the emulator's cost, printed for whoever tunes it: a full block
// of 1024 threads crossing many barriers.
TEST(EmuSpeed, ReportsTheCostOfAContextSwitch) {
  const int rounds = 200;
  std::vector<int> out(1024);
  reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  tarn::launch(many_barriers, 1, 1024, 0, nullptr, out.data(), rounds);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Stats st = stats();
  EXPECT_GE(st.switches, static_cast<uint64_t>(2 * rounds * 1024));
  std::printf("[emu] %llu switches in %.3f s: %.1f ns per switch and barrier bookkeeping\n",
              static_cast<unsigned long long>(st.switches), s, 1e9 * s / static_cast<double>(st.switches));
}

}  // namespace
}  // namespace tarn::emu::testing
