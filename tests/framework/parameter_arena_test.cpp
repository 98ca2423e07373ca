// ParameterArena (framework/parameter_arena.h): parameters are views of one buffer, gradients
// of another, autograd adds into those views in place, and the bits are those of parameters
// that live apart. GradientSync's buckets and ZeRO-1's shards are ranges of the arena.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <unistd.h>
#include <vector>

#include "framework/allocator.h"
#include "framework/distributed/gradient_sync.h"
#include "framework/distributed/sharded_adamw.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/module.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "framework/optim/adamw.h"
#include "kernels/collectives.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

using testing::random_tensor;

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// w1 is tied: `w1_tied` is a copy of its handle, listed as a parameter of its own.
struct Toy : Module {
  Tensor w1 = random_tensor(Shape{4, 8}, 1);
  Tensor w2 = random_tensor(Shape{8, 3}, 2);
  Tensor b = random_tensor(Shape{3}, 3);
  Tensor spare = random_tensor(Shape{5}, 4);
  Tensor w1_tied;
  Toy() {
    register_parameter("w1", w1);
    register_parameter("w2", w2);
    register_parameter("b", b);
    register_parameter("spare", spare);
    w1_tied = w1;
    register_parameter("w1_tied", w1_tied);
  }
  // w1 is used twice, so its gradient is accumulated within one backward.
  Tensor loss(uint64_t seed) const {
    const Tensor x = random_tensor(Shape{5, 4}, seed);
    const Tensor y = add(matmul(tanh(matmul(x, w1)), w2), b);
    return add(sum_all(mul(y, y)), sum_all(mul(w1_tied, w1_tied)));
  }
};

TEST(ParameterArena, ParametersBecomeAlignedViewsOfOneBufferWithTheirValues) {
  Toy m;
  const std::vector<float> w2 = m.w2.to_vector(), b = m.b.to_vector();
  const ParameterArena& arena = m.flatten_parameters();
  ASSERT_EQ(arena.ranges().size(), 4u) << "the tied handle shares w1's range";
  for (const ParameterArena::Range& r : arena.ranges()) {
    EXPECT_TRUE(r.param->same_storage(arena.values()));
    EXPECT_EQ(r.param->data<float>(), arena.values().data<float>() + r.offset);
    EXPECT_EQ(r.offset % ParameterArena::kDefaultAlign, 0);
    EXPECT_TRUE(r.param->requires_grad());
  }
  EXPECT_EQ(m.w1_tied.data<float>(), m.w1.data<float>());
  EXPECT_EQ(m.w2.to_vector(), w2);
  EXPECT_EQ(m.b.to_vector(), b);
  EXPECT_TRUE(arena.holds_its_parameters());
  EXPECT_EQ(&m.flatten_parameters(), &arena) << "flattening again keeps the arena";
  // A write through the arena is a write to the parameter.
  arena.values().narrow0(arena.ranges()[2].offset, arena.ranges()[2].offset + 1).fill(7.0f);
  EXPECT_EQ(m.b.to_vector()[0], 7.0f);
}

TEST(ParameterArena, GradientsAccumulateInPlaceWithTheBitsOfParametersThatLiveApart) {
  Toy apart, flat;
  const ParameterArena& arena = flat.flatten_parameters();
  const auto& ranges = arena.ranges();
  for (int micro = 0; micro < 3; ++micro) {  // accumulation over micro-batches, as a step does
    apart.loss(10 + micro).backward();
    flat.loss(10 + micro).backward();
    for (const ParameterArena::Range& r : ranges) {
      const Tensor g = r.param->grad();
      if (r.param == &flat.spare) {
        EXPECT_FALSE(g.defined()) << "a parameter no backward reached has no gradient";
        continue;
      }
      ASSERT_TRUE(g.defined());
      EXPECT_EQ(g.data<float>(), arena.grads().data<float>() + r.offset) << "the gradient never moves";
    }
    EXPECT_TRUE(same_bits(flat.w1.grad(), apart.w1.grad()));
    EXPECT_TRUE(same_bits(flat.w2.grad(), apart.w2.grad()));
    EXPECT_TRUE(same_bits(flat.b.grad(), apart.b.grad()));
  }
  apart.zero_grad();
  apart.loss(20).backward();
  const int64_t bytes = memory_stats().current_bytes;
  flat.zero_grad();
  EXPECT_FALSE(flat.w1.grad().defined()) << "zero_grad keeps its meaning";
  flat.loss(20).backward();
  EXPECT_EQ(flat.w1.grad().data<float>(), arena.grads().data<float>() + ranges[0].offset);
  EXPECT_TRUE(same_bits(flat.w1.grad(), apart.w1.grad()));
  EXPECT_LE(memory_stats().current_bytes, bytes) << "no gradient buffer is left allocated beside the arena";
}

TEST(ParameterArena, MovingAFlattenedModuleKeepsItFlattened) {
  Toy m;
  m.flatten_parameters();
  const std::vector<float> w2 = m.w2.to_vector();
  m.to(Device::cpu());  // the same device: nothing moves
  ASSERT_NE(m.arena(), nullptr);
  EXPECT_TRUE(m.arena()->holds_its_parameters());
  EXPECT_EQ(m.w2.to_vector(), w2);
}

struct Plain : Module {
  Tensor w = random_tensor(Shape{6, 5}, 7);
  Tensor b = random_tensor(Shape{5}, 8);
  Plain() {
    register_parameter("w", w);
    register_parameter("b", b);
  }
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Checkpoints hold tensors by name: one written by a module whose parameters live apart (as
// every checkpoint before the arena was) loads into the arena's views, and a flattened module
// writes the same bytes.
TEST(ParameterArena, CheckpointsFromModulesWithoutTheArenaLoadIntoItsViews) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string before = (dir / ("tarn_arena_before_" + std::to_string(getpid()) + ".safetensors")).string();
  const std::string after = (dir / ("tarn_arena_after_" + std::to_string(getpid()) + ".safetensors")).string();
  Plain apart;
  save_safetensors(before, state_dict(apart));

  Plain flat;
  const ParameterArena& arena = flat.flatten_parameters();
  Tensor values = arena.values();  // a handle on the same buffer
  values.fill(0.0f);
  load_state_dict(flat, load_safetensors(before).tensors);
  EXPECT_TRUE(arena.holds_its_parameters()) << "loading copies into the views";
  EXPECT_TRUE(same_bits(flat.w, apart.w));
  EXPECT_TRUE(same_bits(flat.b, apart.b));
  save_safetensors(after, state_dict(flat));
  EXPECT_EQ(file_bytes(after), file_bytes(before));
  std::filesystem::remove(before);
  std::filesystem::remove(after);
}

// Two ranks of the CPU thread group, each a replica whose arena takes its gradients.
template <typename Body>
void on_two_ranks(Body body) {
  const auto comms = kernels::cpu::thread_communicators(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { body(r, *comms[r]); });
  for (auto& t : threads) t.join();
}

TEST(ParameterArena, GradientBucketsAreSlicesOfTheArenaReducedInPlace) {
  on_two_ranks([](int rank, kernels::Communicator& comm) {
    Toy m;
    const ParameterArena& arena = m.flatten_parameters();
    GradientSync sync(arena, m.parameters(), comm, /*bucket_bytes=*/64);
    ASSERT_GT(sync.buckets(), 1);
    // The buckets are slices of the arena from its last range down to its first, each range in
    // one of them (the tied w1, listed last, is w1's range: a bucket of its own).
    const auto& ranges = arena.ranges();
    for (int64_t b = 0; b < sync.buckets(); ++b) {
      EXPECT_LT(sync.bucket_begin(b), sync.bucket_end(b));
      EXPECT_LE(sync.bucket_end(b), arena.size());
    }
    EXPECT_EQ(sync.bucket_begin(0), ranges[0].offset);
    EXPECT_EQ(sync.bucket_end(0), ranges[0].end());
    EXPECT_EQ(sync.bucket_end(1), ranges.back().end());
    for (int64_t b = 2; b < sync.buckets(); ++b) EXPECT_LE(sync.bucket_end(b), sync.bucket_begin(b - 1));
    int64_t covered = 0;
    for (int64_t b = 0; b < sync.buckets(); ++b) covered += sync.bucket_end(b) - sync.bucket_begin(b);
    int64_t in_ranges = 0;
    for (const auto& r : ranges) in_ranges += r.numel;
    EXPECT_GE(covered, in_ranges);
    EXPECT_LT(covered, arena.size()) << "the gaps between buckets and the tail are not reduced";

    Toy alone;  // this rank's gradients before the sum
    alone.loss(30 + rank).backward();
    {
      ObserveBackward observe(sync);
      m.loss(30 + rank).backward();
    }
    sync.start_remaining();
    std::vector<double> mask = sync.local_grad_mask();
    comm.all_reduce_host(mask.data(), static_cast<int64_t>(mask.size()), kernels::ReduceOp::max);
    sync.finish(mask);
    // The sum is where the gradient was: 2 ranks, so the sum minus this rank's part is the other's.
    const Tensor g = m.w2.grad();
    EXPECT_EQ(g.data<float>(), arena.grads().data<float>() + arena.ranges()[1].offset);
    EXPECT_FALSE(m.spare.grad().defined()) << "no rank has one";
    EXPECT_FALSE(same_bits(g, alone.w2.grad())) << "the other rank's gradient was added";
  });
}

TEST(ParameterArena, GradientSyncAllocatesNoBucketBuffer) {
  const auto comms = kernels::cpu::thread_communicators(1);
  Toy m;
  const ParameterArena& arena = m.flatten_parameters();
  const int64_t bytes = memory_stats().current_bytes;
  GradientSync sync(arena, m.parameters(), *comms[0]);
  EXPECT_EQ(memory_stats().current_bytes, bytes);
  EXPECT_EQ(sync.elements(), arena.size());
}

TEST(ParameterArena, ZeroOneShardsAreRangesOfTheArenaAndTheParametersStayInIt) {
  on_two_ranks([](int rank, kernels::Communicator& comm) {
    Toy m, plain_model;
    const ParameterArena& arena = m.flatten_parameters(/*pad_to=*/2);
    EXPECT_EQ(arena.size() % 2, 0);
    ShardedAdamW sharded(arena, m.named_parameters(), {}, comm);
    EXPECT_EQ(sharded.shard_elements(), arena.size() / 2);
    EXPECT_EQ(sharded.shard_begin(), rank * arena.size() / 2);
    const float* w1_at = m.w1.data<float>();

    // Every rank the same data: the summed gradient is twice each one's, so plain AdamW on
    // twice the gradient is the reference (no clipping: the norm's order does not enter).
    m.loss(40).backward();
    plain_model.loss(40).backward();
    std::vector<double> mask = sharded.local_grad_mask();
    comm.all_reduce_host(mask.data(), static_cast<int64_t>(mask.size()), kernels::ReduceOp::max);
    sharded.step(mask, /*clip_norm=*/0, 1e-2f);
    AdamW plain(plain_model.named_parameters(), {});
    plain.set_lr(1e-2f);
    plain.step(/*grad_scale=*/2.0f);
    EXPECT_EQ(m.w1.data<float>(), w1_at) << "updated in place";
    EXPECT_TRUE(same_bits(m.w1, plain_model.w1));
    EXPECT_TRUE(same_bits(m.w2, plain_model.w2));
    EXPECT_TRUE(same_bits(m.b, plain_model.b));
    EXPECT_TRUE(same_bits(m.spare, plain_model.spare)) << "no gradient anywhere: left alone";
  });
}

}  // namespace
}  // namespace tarn
