// Collectives (kernels/collectives.h): the CPU thread group's results are exact sums in rank
// order for 1, 2 and 3 ranks; the emulated build's local group is that group; NCCL's all-reduce
// and broadcast agree with it on real GPUs (skipped without one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/collectives.h"
#include "kernels/cuda_runtime.h"

namespace tarn::kernels {
namespace {

using Ranks = std::vector<std::unique_ptr<Communicator>>;

// Runs body(rank's communicator) on one thread per rank; rethrows the first rank's exception.
void RunRanks(const Ranks& ranks, const std::function<void(Communicator&)>& body) {
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*ranks[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Rank r's data: values whose f32 sum depends on the order of addition, so that the test sees
// the rank-order promise (1e8 + 1 - 1e8 is 0 in f32, 1e8 - 1e8 + 1 is 1).
std::vector<float> RankData(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const float big = (i % 3 == 0) ? 1e8f : 0.5f;
    v[i] = rank == 0 ? big : (rank == 1 ? 1.0f + 0.25f * static_cast<float>(i % 7) : -big + 0.001f * rank);
  }
  return v;
}

std::vector<float> SumInRankOrder(int world, int64_t n) {
  std::vector<float> sum = RankData(0, n);
  for (int r = 1; r < world; ++r) {
    const auto d = RankData(r, n);
    for (int64_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  return sum;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp of empty vectors would pass it null pointers, which UBSan rightly rejects.)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class CpuCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CpuCollectives, AllReduceSumIsTheExactSumInRankOrder) {
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{1001}}) {
    const auto want = SumInRankOrder(world, n);
    std::vector<std::vector<float>> data(world);
    for (int r = 0; r < world; ++r) data[r] = RankData(r, n);
    RunRanks(ranks, [&](Communicator& c) {
      EXPECT_EQ(c.world(), world);
      EXPECT_STREQ(c.backend(), "cpu-threads");
      c.all_reduce_sum(data[c.rank()].data(), n);
    });
    for (int r = 0; r < world; ++r) EXPECT_TRUE(SameBits(data[r], want)) << "rank " << r << " n " << n;
  }
}

TEST_P(CpuCollectives, RepeatedCallsStayInStep) {
  // Many calls back to back: a rank that ran ahead into the next call must not disturb one
  // still copying the previous result.
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  constexpr int kCalls = 200;
  constexpr int64_t n = 37;
  std::vector<std::vector<float>> data(world, std::vector<float>(n));
  std::vector<int> wrong(world, 0);  // counted, not asserted: a rank leaving early would hang the rest
  RunRanks(ranks, [&](Communicator& c) {
    auto& mine = data[c.rank()];
    const float factor = static_cast<float>(world * (world + 1) / 2);
    for (int call = 0; call < kCalls; ++call) {
      for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>(c.rank() + 1) * static_cast<float>(call + i);
      c.all_reduce_sum(mine.data(), n);
      for (int64_t i = 0; i < n; ++i) wrong[c.rank()] += mine[i] != factor * static_cast<float>(call + i);
      if (call % 2) c.barrier();
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(wrong[r], 0) << "rank " << r;
}

TEST_P(CpuCollectives, BroadcastCopiesTheRootsBuffer) {
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  for (int root = 0; root < world; ++root) {
    std::vector<std::vector<float>> data(world);
    for (int r = 0; r < world; ++r) data[r] = RankData(r, 129);
    RunRanks(ranks, [&](Communicator& c) { c.broadcast(data[c.rank()].data(), 129, root); });
    const auto want = RankData(root, 129);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(SameBits(data[r], want)) << "root " << root << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, CpuCollectives, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "World" + std::to_string(info.param); });

TEST(CpuCollectivesErrors, MismatchedLengthsAreAnErrorOnEveryRank) {
  const auto ranks = cpu::thread_communicators(2);
  std::vector<float> a(4), b(5);
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        ranks[r]->all_reduce_sum(r == 0 ? a.data() : b.data(), r == 0 ? 4 : 5);
      } catch (const Error& e) {
        messages[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_NE(messages[r].find("rank 1 passed n = 5"), std::string::npos) << messages[r];
}

TEST(CpuCollectivesErrors, BadWorldAndRootAreErrors) {
  EXPECT_THROW(cpu::thread_communicators(0), Error);
  const auto one = cpu::thread_communicators(1);
  std::vector<float> v(3);
  EXPECT_THROW(one[0]->broadcast(v.data(), 3, 1), Error);
  EXPECT_THROW(one[0]->all_reduce_sum(v.data(), -1), Error);
}

TEST(EmulatedCollectives, LocalGroupIsTheCpuThreadGroup) {
  EXPECT_FALSE(cuda_emu::nccl_available());
  EXPECT_THROW(cuda_emu::nccl_unique_id(), Error);
  const auto ranks = cuda_emu::local_communicators(3);
  ASSERT_EQ(ranks.size(), 3u);
  std::vector<std::vector<float>> data(3);
  for (int r = 0; r < 3; ++r) data[r] = RankData(r, 65);
  RunRanks(ranks, [&](Communicator& c) { c.all_reduce_sum(data[c.rank()].data(), 65); });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(SameBits(data[r], SumInRankOrder(3, 65))) << "rank " << r;
}

// NCCL on every GPU of this machine (one rank per device): sums of small integers, exact in any
// order, so NCCL's own summation order does not matter here.
TEST(NcclCollectives, AllReduceAndBroadcastOnEveryDevice) {
#if !defined(TARN_WITH_CUDA)
  GTEST_SKIP() << "built without the CUDA backend (TARN_CUDA=OFF)";
#else
  if (!cuda::nccl_available()) GTEST_SKIP() << "built without NCCL (cmake/TarnCuda.cmake did not find it)";
  const int devices = cuda::device_count();
  if (devices == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount() == 0)";
  const auto ranks = cuda::local_communicators(devices);
  constexpr int64_t n = 1 << 16;
  std::vector<float*> buffers(devices);
  for (int r = 0; r < devices; ++r) {
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>((r + 1) * (i % 100));
    buffers[r] = static_cast<float*>(cuda::device_malloc(n * sizeof(float), r));
    cuda::copy_host_to_device(buffers[r], host.data(), n * sizeof(float), r);
  }
  RunRanks(ranks, [&](Communicator& c) {
    EXPECT_STREQ(c.backend(), "nccl");
    c.all_reduce_sum(buffers[c.rank()], n);
    c.barrier();
  });
  const float factor = static_cast<float>(devices * (devices + 1) / 2);
  for (int r = 0; r < devices; ++r) {
    std::vector<float> host(n);
    cuda::copy_device_to_host(host.data(), buffers[r], n * sizeof(float), r);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host[i], factor * static_cast<float>(i % 100)) << "rank " << r;
  }
  RunRanks(ranks, [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<float> ones(n, 1.0f);
      cuda::copy_host_to_device(buffers[0], ones.data(), n * sizeof(float), 0);
    }
    c.broadcast(buffers[c.rank()], n, 0);
  });
  for (int r = 0; r < devices; ++r) {
    std::vector<float> host(n);
    cuda::copy_device_to_host(host.data(), buffers[r], n * sizeof(float), r);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(host[i], 1.0f) << "rank " << r;
    cuda::device_free(buffers[r], r);
  }
#endif
}

}  // namespace
}  // namespace tarn::kernels
