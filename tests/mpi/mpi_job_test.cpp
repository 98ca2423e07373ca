// The MPI communicator inside an MPI job (ctest runs this suite under mpiexec -np 2, and -np 3;
// tests/CMakeLists.txt). Every rank regenerates every rank's input from a seed and runs the
// CPU thread group (kernels/cpu/collectives.cpp) on them in-process, and its MPI result must
// equal that reference bit for bit: the same rank-order sums, for any number of ranks.
// Outside mpiexec these tests skip.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/collectives.h"
#include "kernels/mpi/mpi.h"

namespace tarn::kernels {
namespace {

constexpr double kTimeoutS = 30;  // generous: a loaded machine must not fail a correct test

// Sizes from the brief of every collective: empty, one, odd, and past 2^20 (many chunks when
// the chunk is shrunk).
const std::vector<int64_t> kSizes = {0, 1, 7, (int64_t{1} << 20) + 3};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank r's n inputs for call `seed`: signs and magnitudes (2^-8 .. 2^24) vary, so f32 sums of
// three or more ranks depend on the order of addition.
template <typename T>
std::vector<T> Input(uint64_t seed, int rank, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = Mix(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + static_cast<uint64_t>(i) * 31u);
    const double unit = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0, 1)
    v[i] = static_cast<T>((unit - 0.5) * std::ldexp(1.0, static_cast<int>(h % 33) - 8));
  }
  return v;
}

// body(rank's thread communicator) on one thread per rank: the reference.
void OnThreadGroup(int world, const std::function<void(Communicator&)>& body) {
  const auto ranks = cpu::thread_communicators(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { body(*ranks[r]); });
  for (auto& t : threads) t.join();
}

// "" when a and b hold the same bits, else where they first differ.
template <typename T>
std::string Difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return "first difference at " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
             std::to_string(want[i]);
  return "";
}

// Parameter: the chunk size (set_chunk_values); 0 is the default, 4099 makes every large call
// a long series of steps whose sizes divide nothing evenly.
class MpiJob : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!mpi::launch_info().launched) GTEST_SKIP() << "not under mpiexec (ctest runs this suite with mpiexec -np 2)";
    mpi::set_chunk_values(GetParam());
    comm_ = mpi::world_communicator(kTimeoutS);
    rank_ = comm_->rank();
    world_ = comm_->world();
  }
  void TearDown() override { mpi::set_chunk_values(0); }

  std::unique_ptr<Communicator> comm_;
  int rank_ = 0, world_ = 1;
};

TEST_P(MpiJob, AllReduceSumIsTheThreadGroupsRankOrderSum) {
  uint64_t seed = 1;
  for (int64_t n : kSizes) {
    ++seed;
    std::vector<float> mine = Input<float>(seed, rank_, n);
    comm_->all_reduce_sum(mine.data(), n);
    std::vector<std::vector<float>> ref(world_);
    OnThreadGroup(world_, [&](Communicator& c) {
      ref[c.rank()] = Input<float>(seed, c.rank(), n);
      c.all_reduce_sum(ref[c.rank()].data(), n);
    });
    EXPECT_EQ(Difference(mine, ref[rank_]), "") << "rank " << rank_ << " n " << n;
  }
}

// Several all-reduces in flight at once, moved on by test() while the rank "computes", with a
// blocking host reduction between them: every one ends with the thread group's bits, and the
// collectives after them still agree (the queue kept every rank's calls in one order).
TEST_P(MpiJob, StartedAllReducesCompleteInOrderWithTheThreadGroupsBits) {
  const uint64_t first_seed = 300;
  std::vector<std::vector<float>> mine;
  for (size_t k = 0; k < kSizes.size(); ++k) mine.push_back(Input<float>(first_seed + k, rank_, kSizes[k]));
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (size_t k = 0; k < 2; ++k) pending.push_back(comm_->start_all_reduce_sum(mine[k].data(), kSizes[k]));
  // The ranks arrive at different times, as after a backward of uneven length.
  std::this_thread::sleep_for(std::chrono::milliseconds(rank_ == 0 ? 20 : 1));
  for (size_t k = 2; k < kSizes.size(); ++k) {
    pending.push_back(comm_->start_all_reduce_sum(mine[k].data(), kSizes[k]));
    for (int i = 0; i < 50; ++i) pending.back()->test();
  }
  while (!pending.front()->test()) {
  }
  double flag = rank_;
  comm_->all_reduce_host(&flag, 1, ReduceOp::sum);  // completes every started collective first
  EXPECT_EQ(flag, world_ * (world_ - 1) / 2.0);
  for (auto& p : pending) {
    EXPECT_TRUE(p->test());
    p->wait();
  }
  for (size_t k = 0; k < kSizes.size(); ++k) {
    std::vector<std::vector<float>> ref(world_);
    OnThreadGroup(world_, [&](Communicator& c) {
      ref[c.rank()] = Input<float>(first_seed + k, c.rank(), kSizes[k]);
      c.all_reduce_sum(ref[c.rank()].data(), kSizes[k]);
    });
    EXPECT_EQ(Difference(mine[k], ref[rank_]), "") << "rank " << rank_ << " n " << kSizes[k];
  }
  // And one waited for at once, then a different collective.
  std::vector<float> one = {static_cast<float>(rank_ + 1)};
  comm_->start_all_reduce_sum(one.data(), 1)->wait();
  EXPECT_EQ(one[0], world_ * (world_ + 1) / 2.0f);
  comm_->barrier();
}

TEST_P(MpiJob, ReduceScatterSumMatchesTheThreadGroupInAndOutOfPlace) {
  uint64_t seed = 100;
  for (int64_t n : kSizes) {
    for (bool in_place : {false, true}) {
      ++seed;
      std::vector<float> send = Input<float>(seed, rank_, world_ * n), out(n, -7.0f);
      float* recv = in_place ? send.data() + rank_ * n : out.data();
      comm_->reduce_scatter_sum(send.data(), recv, n);
      const std::vector<float> mine(recv, recv + n);
      std::vector<std::vector<float>> ref(world_);
      OnThreadGroup(world_, [&](Communicator& c) {
        const auto input = Input<float>(seed, c.rank(), world_ * n);
        ref[c.rank()].assign(n, 0.0f);
        c.reduce_scatter_sum(input.data(), ref[c.rank()].data(), n);
      });
      EXPECT_EQ(Difference(mine, ref[rank_]), "") << "rank " << rank_ << " n " << n << " in place " << in_place;
    }
  }
}

TEST_P(MpiJob, AllGatherMatchesTheThreadGroupInAndOutOfPlace) {
  uint64_t seed = 200;
  for (int64_t n : kSizes) {
    for (bool in_place : {false, true}) {
      ++seed;
      const std::vector<float> input = Input<float>(seed, rank_, n);
      std::vector<float> recv(world_ * n, -7.0f);
      if (in_place) {
        std::copy(input.begin(), input.end(), recv.begin() + rank_ * n);
        comm_->all_gather(recv.data() + rank_ * n, recv.data(), n);
      } else {
        comm_->all_gather(input.data(), recv.data(), n);
      }
      std::vector<float> want;
      for (int r = 0; r < world_; ++r) {
        const auto part = Input<float>(seed, r, n);
        want.insert(want.end(), part.begin(), part.end());
      }
      EXPECT_EQ(Difference(recv, want), "") << "rank " << rank_ << " n " << n << " in place " << in_place;
    }
  }
}

TEST_P(MpiJob, BroadcastCopiesTheRootsValuesAndBytes) {
  uint64_t seed = 300;
  for (int64_t n : kSizes) {
    for (int root = 0; root < world_; ++root) {
      ++seed;
      std::vector<float> values = Input<float>(seed, rank_, n);
      comm_->broadcast(values.data(), n, root);
      EXPECT_EQ(Difference(values, Input<float>(seed, root, n)), "") << "rank " << rank_ << " n " << n;
      std::vector<char> bytes(n);
      for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(Mix(seed + i + 1000 * rank_));
      comm_->broadcast_host_bytes(bytes.data(), n, root);
      bool same = true;
      for (int64_t i = 0; i < n; ++i) same = same && bytes[i] == static_cast<char>(Mix(seed + i + 1000 * root));
      EXPECT_TRUE(same) << "rank " << rank_ << " n " << n << " root " << root;
    }
  }
}

TEST_P(MpiJob, HostReductionsMatchTheThreadGroupBitForBit) {
  uint64_t seed = 400;
  for (int64_t n : kSizes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      ++seed;
      std::vector<double> mine = Input<double>(seed, rank_, n);
      comm_->all_reduce_host(mine.data(), n, op);
      std::vector<std::vector<double>> ref(world_);
      OnThreadGroup(world_, [&](Communicator& c) {
        ref[c.rank()] = Input<double>(seed, c.rank(), n);
        c.all_reduce_host(ref[c.rank()].data(), n, op);
      });
      EXPECT_EQ(Difference(mine, ref[rank_]), "") << "rank " << rank_ << " n " << n << " op " << static_cast<int>(op);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Chunks, MpiJob, ::testing::Values(int64_t{0}, int64_t{4099}),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return info.param == 0 ? std::string("DefaultChunk") : "Chunk" + std::to_string(info.param);
                         });

// The message of the E that f() throws, or "" when it throws nothing (any other exception
// escapes and fails the test).
template <typename E = mpi::CollectiveError, typename F>
std::string MessageOf(const F& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

// The job-level checks below need one communicator each and no chunk parameter.
class MpiJobErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi::launch_info().launched) GTEST_SKIP() << "not under mpiexec (ctest runs this suite with mpiexec -np 2)";
  }
};

TEST_F(MpiJobErrors, LaunchInfoAndLocalRankAgreeWithTheCommunicator) {
  const auto comm = mpi::world_communicator(kTimeoutS);
  const mpi::LaunchInfo info = mpi::launch_info();
  EXPECT_TRUE(mpi::initialized());
  EXPECT_STREQ(comm->backend(), "mpi");
  EXPECT_EQ(info.launcher, "Open MPI");
  EXPECT_EQ(info.rank, comm->rank());
  EXPECT_EQ(info.world, comm->world());
  EXPECT_EQ(info.local_world, comm->world());  // one machine
  EXPECT_EQ(mpi::local_rank(), comm->rank());
  comm->barrier();
}

TEST_F(MpiJobErrors, DisagreeingCallsThrowTheSameListOnEveryRank) {
  const auto comm = mpi::world_communicator(kTimeoutS);
  std::vector<float> buffer(8, 1.0f);
  const std::string message = MessageOf([&] { comm->all_reduce_sum(buffer.data(), comm->rank() == 1 ? 5 : 4); });
  EXPECT_NE(message.find("rank 0 called all_reduce_sum #1 (n = 4), rank 1 called all_reduce_sum #1 (n = 5)"),
            std::string::npos)
      << message;
  // Unusable afterwards, and says so.
  EXPECT_THROW(comm->barrier(), Error);
}

TEST_F(MpiJobErrors, AStartedAllReduceMetByAnotherCollectiveIsAnErrorOnEveryRank) {
  const auto comm = mpi::world_communicator(kTimeoutS);
  std::vector<float> buffer(8, 1.0f);
  const std::string message = MessageOf([&] {
    if (comm->rank() == 1)
      comm->broadcast(buffer.data(), 8, 0);
    else
      comm->start_all_reduce_sum(buffer.data(), 8)->wait();
  });
  EXPECT_NE(message.find("rank 0 called all_reduce_sum #1 (n = 8), rank 1 called broadcast #1 (n = 8, root 0)"),
            std::string::npos)
      << message;
}

TEST_F(MpiJobErrors, ADifferentCollectiveOrRootIsAnErrorOnEveryRank) {
  const auto comm = mpi::world_communicator(kTimeoutS);
  std::vector<float> buffer(8, 1.0f);
  std::string message =
      MessageOf<Error>([&] { comm->broadcast(buffer.data(), 8, comm->world()); });  // every rank: root out of range
  EXPECT_NE(message.find("broadcast: root " + std::to_string(comm->world()) + " is not a rank"), std::string::npos)
      << message;
  comm->barrier();  // an agreed bad root leaves the communicator usable
  message = MessageOf([&] {
    if (comm->rank() == 1)
      comm->barrier();
    else
      comm->broadcast(buffer.data(), 8, 0);
  });
  EXPECT_NE(message.find("rank 0 called broadcast #3 (n = 8, root 0), rank 1 called barrier #3 (n = 0)"),
            std::string::npos)
      << message;
}

TEST_F(MpiJobErrors, ACollectivePastItsDeadlineNamesRankCollectiveSequenceAndSize) {
  // Rank 0 waits 0.3 s for a barrier that the others enter after 1 s: rank 0 throws; theirs
  // then completes against rank 0's abandoned header (progressed by rank 0's later MPI calls),
  // so every rank carries on. `sync` lines the ranks up before and after.
  const auto sync = mpi::world_communicator(kTimeoutS);
  sync->barrier();
  const auto comm = mpi::world_communicator(0.3);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = MessageOf([&] {
    if (comm->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    comm->barrier();
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm->rank() == 0) {
    EXPECT_EQ(message,
              "rank 0: barrier #1 (0 values) did not complete within 0.3 s: another rank exited, is stuck, or called a "
              "different collective (training.collective_timeout_s)");
    EXPECT_GE(waited, 0.3);
    EXPECT_LT(waited, 5.0);  // it threw, so it did not wait for the others; this bounds how late
  } else {
    EXPECT_EQ(message, "");
  }
  sync->barrier();
}

}  // namespace
}  // namespace tarn::kernels
