// GradientSync (framework/distributed/gradient_sync.h) on the CPU thread group: two ranks, each
// a thread with its own replica of a few parameters and its own data. The summed gradients must
// be the same bits with and without overlap, for any bucket size, and equal to the rank-order
// sum of what each rank computed alone.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "framework/autograd.h"
#include "framework/distributed/gradient_sync.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "framework/rng.h"

namespace tarn {
namespace {

Tensor filled(const Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 997.0f;
  }
  return Tensor::from_vector(v, shape);
}

// One rank's replica. w1 is tied: it appears twice in the parameter list, as a tied embedding
// does; `only_rank0` is used by rank 0 alone; `never` by nobody.
struct Replica {
  Tensor w1 = filled(Shape{4, 8}, 1).set_requires_grad(true);
  Tensor w1_tied = w1;
  Tensor w2 = filled(Shape{8, 8}, 2).set_requires_grad(true);
  Tensor b = filled(Shape{8}, 3).set_requires_grad(true);
  Tensor only_rank0 = filled(Shape{3}, 4).set_requires_grad(true);
  Tensor never = filled(Shape{2}, 5).set_requires_grad(true);
  std::vector<Tensor*> params() { return {&w1, &w2, &b, &only_rank0, &never, &w1_tied}; }

  // w1 feeds the loss at the bottom of the graph and again at the top.
  Tensor loss(int rank) {
    const Tensor x = filled(Shape{5, 4}, 10 + static_cast<uint64_t>(rank));
    Tensor l = add(sum_all(matmul(matmul(x, w1), w2)), sum_all(mul(b, b)));
    if (rank == 0) l = add(l, sum_all(mul(only_rank0, only_rank0)));
    return add(l, sum_all(mul(w1, w1)));
  }
};

struct Result {
  std::vector<std::vector<float>> grads;  // per parameter; empty when it has none
  int64_t early = 0;
};

// Both ranks' gradients after a synchronised step.
std::vector<Result> run(bool overlap, int64_t bucket_bytes) {
  const auto comms = kernels::cpu::thread_communicators(2);
  std::vector<Result> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Replica m;
      GradientSync sync(m.params(), *comms[r], bucket_bytes);
      const Tensor loss = m.loss(r);
      std::optional<ObserveBackward> observe;
      if (overlap) observe.emplace(sync);
      loss.backward();
      sync.start_remaining();
      std::vector<double> mask = sync.local_grad_mask();
      comms[r]->all_reduce_host(mask.data(), static_cast<int64_t>(mask.size()), kernels::ReduceOp::max);
      sync.finish(mask);
      for (Tensor* p : m.params()) out[r].grads.push_back(p->grad().defined() ? p->grad().to_vector() : std::vector<float>{});
      out[r].early = sync.last_buckets_started_early();
    });
  for (auto& t : threads) t.join();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(GradientSync, OverlapGivesTheBitsOfTheRankOrderSumForAnyBucketSize) {
  // What each rank computes alone, summed in rank order.
  std::vector<std::vector<std::vector<float>>> alone(2);
  for (int r = 0; r < 2; ++r) {
    Replica m;
    m.loss(r).backward();
    for (Tensor* p : m.params()) alone[r].push_back(p->grad().defined() ? p->grad().to_vector() : std::vector<float>{});
  }
  const std::vector<Result> plain = run(false, GradientSync::kDefaultBucketBytes);
  for (size_t i = 0; i < alone[0].size(); ++i) {
    std::vector<float> want = alone[0][i].empty() ? std::vector<float>(alone[1][i].size(), 0.0f) : alone[0][i];
    if (!alone[1][i].empty())
      for (size_t k = 0; k < want.size(); ++k) want[k] += alone[1][i][k];
    if (alone[0][i].empty() && alone[1][i].empty()) want.clear();
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(same_bits(plain[r].grads[i], want)) << "parameter " << i << " rank " << r;
  }
  EXPECT_TRUE(plain[0].grads[4].empty()) << "a parameter no rank used must keep no gradient";
  EXPECT_FALSE(plain[1].grads[3].empty()) << "rank 1 takes part with zeros and gets rank 0's gradient";
  EXPECT_EQ(plain[0].early, 0);

  for (int64_t bucket_bytes : {int64_t{4}, int64_t{100}, int64_t{1000}, GradientSync::kDefaultBucketBytes}) {
    const std::vector<Result> overlapped = run(true, bucket_bytes);
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < plain[r].grads.size(); ++i)
        EXPECT_TRUE(same_bits(overlapped[r].grads[i], plain[r].grads[i]))
            << "parameter " << i << " rank " << r << " bucket_bytes " << bucket_bytes;
  }
  // Small buckets: some start before the backward ends (on rank 1, `only_rank0` is never
  // reached, so its bucket and those after it wait for start_remaining).
  const std::vector<Result> small = run(true, 4);
  EXPECT_GT(small[0].early, 0);
  EXPECT_GT(small[1].early, 0);
}

TEST(GradientSync, OneRankCommunicatesNothingAndLeavesTheGradients) {
  const auto solo = kernels::solo_communicator();
  Replica m;
  GradientSync sync(m.params(), *solo, 4);
  {
    ObserveBackward observe(sync);
    m.loss(0).backward();
  }
  const std::vector<float> before = m.w2.grad().to_vector();
  sync.start_remaining();
  sync.finish(sync.local_grad_mask());
  EXPECT_TRUE(same_bits(m.w2.grad().to_vector(), before));
  EXPECT_FALSE(m.never.grad().defined());
  EXPECT_EQ(sync.last_buckets_started_early(), 0);
}

}  // namespace
}  // namespace tarn
