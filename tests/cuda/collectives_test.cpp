// Collectives (kernels/collectives.h): the CPU thread group's results are exact sums in rank
// order for 1, 2 and 3 ranks; the emulated build's local group is that group; NCCL's all-reduce
// and broadcast agree with it on real GPUs (skipped without one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/collectives.h"
#include "kernels/cuda_runtime.h"
#include "tests/cuda/tolerance.h"

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

TEST_P(CpuCollectives, ReduceScatterThenAllGatherIsAllReduceBitForBit) {
  // Rank r's send holds world slices of n; out of place and in place (recv == send + r * n,
  // send == recv + r * n) must give the all-reduce's bits.
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
    for (bool in_place : {false, true}) {
      std::vector<std::vector<float>> whole(world), reduced(world), slice(world), gathered(world);
      for (int r = 0; r < world; ++r) {
        whole[r] = RankData(r, world * n);
        reduced[r] = whole[r];
        slice[r].assign(n, -1.0f);
        gathered[r].assign(world * n, -1.0f);
      }
      RunRanks(ranks, [&](Communicator& c) {
        const int r = c.rank();
        c.all_reduce_sum(reduced[r].data(), world * n);
        if (in_place) {
          c.reduce_scatter_sum(whole[r].data(), whole[r].data() + r * n, n);
          c.all_gather(whole[r].data() + r * n, whole[r].data(), n);
        } else {
          c.reduce_scatter_sum(whole[r].data(), slice[r].data(), n);
          c.all_gather(slice[r].data(), gathered[r].data(), n);
        }
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(SameBits(reduced[r], SumInRankOrder(world, world * n))) << "rank " << r << " n " << n;
        EXPECT_TRUE(SameBits(in_place ? whole[r] : gathered[r], reduced[r]))
            << "rank " << r << " n " << n << (in_place ? " in place" : " out of place");
      }
    }
  }
}

TEST_P(CpuCollectives, HostReductionsAreRankOrderSumMaxAndMin) {
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  // Rank-order-sensitive doubles: 1e17 + 1 - 1e17 is 0 in double, 1e17 - 1e17 + 1 is 1.
  auto value = [](int r, int i) { return r == 0 ? 1e17 * (i % 2) : r == 1 ? 1.0 + i : -1e17 * (i % 2) - r * 0.5 * i; };
  constexpr int n = 9;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<std::vector<double>> data(world, std::vector<double>(n));
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < n; ++i) data[r][i] = value(r, i);
    RunRanks(ranks, [&](Communicator& c) { c.all_reduce_host(data[c.rank()].data(), n, op); });
    for (int i = 0; i < n; ++i) {
      double want = value(0, i);
      for (int r = 1; r < world; ++r)
        want = op == ReduceOp::sum ? want + value(r, i) : op == ReduceOp::max ? std::max(want, value(r, i))
                                                                             : std::min(want, value(r, i));
      for (int r = 0; r < world; ++r)
        EXPECT_EQ(std::memcmp(&data[r][i], &want, sizeof(double)), 0)
            << "op " << static_cast<int>(op) << " rank " << r << " i " << i << ": " << data[r][i] << " vs " << want;
    }
  }
}

TEST_P(CpuCollectives, BroadcastHostBytesCopiesTheRootsBytes) {
  const int world = GetParam();
  const auto ranks = cpu::thread_communicators(world);
  for (int root = 0; root < world; ++root) {
    std::vector<std::string> data(world);
    for (int r = 0; r < world; ++r) data[r] = "rank " + std::to_string(r) + " says hello";
    RunRanks(ranks, [&](Communicator& c) {
      c.broadcast_host_bytes(data[c.rank()].data(), static_cast<int64_t>(data[c.rank()].size()), root);
      c.broadcast_host_bytes(nullptr, 0, root);  // nothing to send is fine, even without a buffer
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(data[r], "rank " + std::to_string(root) + " says hello") << r;
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

// Runs body on every rank of a fresh group of `world` and returns each rank's error message
// ("" when it did not throw).
std::vector<std::string> Messages(int world, const std::function<void(Communicator&)>& body) {
  const auto ranks = cpu::thread_communicators(world);
  std::vector<std::string> messages(world);
  RunRanks(ranks, [&](Communicator& c) {
    try {
      body(c);
    } catch (const Error& e) {
      messages[c.rank()] = e.what();
    }
  });
  return messages;
}

TEST(CpuCollectivesErrors, MismatchesOfTheNewCollectivesNameTheRankOnEveryRank) {
  std::vector<float> buffer(20, 1.0f);
  std::vector<double> host(5, 1.0);
  const auto expect_everywhere = [](const std::vector<std::string>& messages, const std::string& want) {
    for (size_t r = 0; r < messages.size(); ++r)
      EXPECT_NE(messages[r].find(want), std::string::npos) << "rank " << r << ": " << messages[r];
  };
  expect_everywhere(Messages(2, [&](Communicator& c) { c.reduce_scatter_sum(buffer.data(), buffer.data(), 3 + c.rank()); }),
                    "reduce_scatter_sum: rank 1 passed n = 4 but rank 0 passed 3");
  expect_everywhere(Messages(2, [&](Communicator& c) { c.all_gather(buffer.data(), buffer.data(), 5 - c.rank()); }),
                    "all_gather: rank 1 passed n = 4 but rank 0 passed 5");
  expect_everywhere(Messages(2, [&](Communicator& c) {
                      c.all_reduce_host(host.data(), 5, c.rank() == 0 ? ReduceOp::sum : ReduceOp::max);
                    }),
                    "all_reduce_host: rank 1 passed op max but rank 0 passed sum");
  expect_everywhere(Messages(2, [&](Communicator& c) { c.broadcast_host_bytes(buffer.data(), 8, c.rank()); }),
                    "broadcast_host_bytes: rank 1 passed root 1 but rank 0 passed 0");
  expect_everywhere(Messages(3, [&](Communicator& c) { c.broadcast_host_bytes(buffer.data(), 8, 3); }),
                    "broadcast_host_bytes: root 3 is not a rank of a group of 3");
  expect_everywhere(Messages(2, [&](Communicator& c) {
                      if (c.rank() == 0)
                        c.all_reduce_sum(buffer.data(), 4);
                      else
                        c.broadcast(buffer.data(), 4, 0);
                    }),
                    "rank 1 called broadcast but rank 0 called all_reduce_sum");
}

TEST(SoloCommunicator, IsOneRankThatCopiesOnlyWhenOutOfPlace) {
  const auto solo = solo_communicator();
  EXPECT_EQ(solo->rank(), 0);
  EXPECT_EQ(solo->world(), 1);
  EXPECT_STREQ(solo->backend(), "solo");
  const auto data = RankData(0, 11);
  auto same = data;
  solo->all_reduce_sum(same.data(), 11);
  solo->broadcast(same.data(), 11, 0);
  EXPECT_TRUE(SameBits(same, data));
  std::vector<float> out(11, 0.0f);
  solo->reduce_scatter_sum(data.data(), out.data(), 11);
  EXPECT_TRUE(SameBits(out, data));
  out.assign(11, 0.0f);
  solo->all_gather(data.data(), out.data(), 11);
  EXPECT_TRUE(SameBits(out, data));
  solo->reduce_scatter_sum(same.data(), same.data(), 11);  // in place: nothing moves
  solo->all_gather(same.data(), same.data(), 11);
  EXPECT_TRUE(SameBits(same, data));
  std::vector<double> host = {1.5, -2.0};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) solo->all_reduce_host(host.data(), 2, op);
  EXPECT_EQ(host, (std::vector<double>{1.5, -2.0}));
  char bytes[4] = {'a', 'b', 'c', 0};
  solo->broadcast_host_bytes(bytes, 4, 0);
  EXPECT_STREQ(bytes, "abc");
  solo->barrier();
  solo->all_reduce_sum(nullptr, 0);
  EXPECT_THROW(solo->broadcast(same.data(), 11, 1), Error);
  EXPECT_THROW(solo->broadcast_host_bytes(bytes, 4, -1), Error);
  EXPECT_THROW(solo->all_gather(data.data(), out.data(), -1), Error);
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

#if defined(TARN_WITH_CUDA)
// Why the NCCL tests cannot run here, or "" when they can.
std::string NcclSkipReason() {
  if (!cuda::nccl_available()) return "built without NCCL (cmake/TarnCuda.cmake did not find it)";
  if (cuda::device_count() == 0) return "no CUDA device (cudaGetDeviceCount() == 0)";
  // One rank's all-reduce is a copy: it would pass whatever the collective did. NCCL refuses two
  // ranks of one communicator on one device, so a second device is the least that tests it.
  if (cuda::device_count() < 2) return "one CUDA device: NCCL collectives need 2 devices to be tested";
  return "";
}
#endif

// NCCL on every GPU of this machine (one rank per device): sums of small integers, exact in any
// order, so NCCL's own summation order does not matter here.
TEST(NcclCollectives, AllReduceAndBroadcastOnEveryDevice) {
#if !defined(TARN_WITH_CUDA)
  GTEST_SKIP() << "built without the CUDA backend (TARN_CUDA=OFF)";
#else
  if (const std::string why = NcclSkipReason(); !why.empty()) GTEST_SKIP() << why;
  const int devices = cuda::device_count();
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

// NCCL's reduce-scatter and all-gather (in and out of place) against the thread group on the same
// inputs, and the host collectives bit for bit (they reduce on the host in rank order); one
// rank per device.
TEST(NcclCollectives, ReduceScatterAllGatherAndHostCollectivesOnEveryDevice) {
#if !defined(TARN_WITH_CUDA)
  GTEST_SKIP() << "built without the CUDA backend (TARN_CUDA=OFF)";
#else
  if (const std::string why = NcclSkipReason(); !why.empty()) GTEST_SKIP() << why;
  const int devices = cuda::device_count();
  const auto ranks = cuda::local_communicators(devices);
  const auto reference = cpu::thread_communicators(devices);
  constexpr int64_t n = 4099;
  const size_t bytes = devices * n * sizeof(float);
  for (bool in_place : {false, true}) {
    std::vector<std::vector<float>> want(devices);
    for (int r = 0; r < devices; ++r) want[r] = RankData(r, devices * n);
    std::vector<float*> send(devices), recv(devices);
    for (int r = 0; r < devices; ++r) {
      send[r] = static_cast<float*>(cuda::device_malloc(bytes, r));
      recv[r] = static_cast<float*>(cuda::device_malloc(bytes, r));
      cuda::copy_host_to_device(send[r], want[r].data(), bytes, r);
    }
    RunRanks(reference, [&](Communicator& c) { c.all_reduce_sum(want[c.rank()].data(), devices * n); });
    RunRanks(ranks, [&](Communicator& c) {
      const int r = c.rank();
      if (in_place) {
        c.reduce_scatter_sum(send[r], send[r] + r * n, n);
        c.all_gather(send[r] + r * n, send[r], n);
      } else {
        c.reduce_scatter_sum(send[r], recv[r] + r * n, n);
        c.all_gather(recv[r] + r * n, recv[r], n);
      }
    });
    // NCCL sums the ranks' values in its own order (kernels/collectives.h), the thread group in
    // rank order: each within gamma_{devices-1}(2^-24) sum_r |x_r| of the exact sum.
    std::vector<double> magnitude(devices * n, 0.0);
    for (int r = 0; r < devices; ++r) {
      const auto x = RankData(r, devices * n);
      for (int64_t i = 0; i < devices * n; ++i) magnitude[i] += std::fabs(x[i]);
    }
    const double rel = 2 * cuda_testing::Gamma(devices - 1, cuda_testing::kF32);
    for (int r = 0; r < devices; ++r) {
      std::vector<float> got(devices * n);
      cuda::copy_device_to_host(got.data(), in_place ? send[r] : recv[r], bytes, r);
      for (int64_t i = 0; i < devices * n; ++i)
        ASSERT_LE(std::fabs(double(got[i]) - want[r][i]), rel * magnitude[i]) << "rank " << r << " i " << i;
      cuda::device_free(send[r], r);
      cuda::device_free(recv[r], r);
    }
  }
  std::vector<std::vector<double>> host(devices), host_ref(devices);
  std::vector<std::string> text(devices);
  for (int r = 0; r < devices; ++r) {
    host[r] = {1e17 * r, 1.0 + r, -1e17 * r, 0.5};
    host_ref[r] = host[r];
    text[r] = "from rank " + std::to_string(r);
  }
  RunRanks(reference, [&](Communicator& c) { c.all_reduce_host(host_ref[c.rank()].data(), 4, ReduceOp::sum); });
  RunRanks(ranks, [&](Communicator& c) {
    c.all_reduce_host(host[c.rank()].data(), 4, ReduceOp::sum);
    c.broadcast_host_bytes(text[c.rank()].data(), static_cast<int64_t>(text[c.rank()].size()), 0);
  });
  for (int r = 0; r < devices; ++r) {
    EXPECT_EQ(std::memcmp(host[r].data(), host_ref[r].data(), 4 * sizeof(double)), 0) << "rank " << r;
    EXPECT_EQ(text[r], "from rank 0") << "rank " << r;
  }
#endif
}

}  // namespace
}  // namespace tarn::kernels
