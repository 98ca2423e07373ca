// TrainStep (framework/train/step.h) on a toy module, without BART or data: one rank against two
// (the CPU thread group), plain AdamW against ZeRO-1, overlap on and off, and the skip policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "framework/module.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "framework/optim/adamw.h"
#include "framework/optim/clip_grad.h"
#include "framework/train/step.h"
#include "kernels/collectives.h"
#include "kernels/optim.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

using testing::random_tensor;

// y = tanh(x W1) W2 + b; `spare` is used only when a test asks (a parameter some ranks never
// touch).
struct Toy : Module {
  Tensor w1 = random_tensor(Shape{4, 8}, 1);
  Tensor w2 = random_tensor(Shape{8, 3}, 2);
  Tensor b = random_tensor(Shape{3}, 3);
  Tensor spare = random_tensor(Shape{5}, 4);
  Toy() {
    register_parameter("w1", w1);
    register_parameter("w2", w2);
    register_parameter("b", b);
    register_parameter("spare", spare);
  }
};

// Rows [first, first + count) of micro-batch `k`: inputs x and targets t, the same whichever
// rank holds them.
Tensor rows_of(uint64_t seed, int64_t first, int64_t count, int64_t cols) {
  const Tensor all = random_tensor(Shape{16, cols}, seed);
  return all.narrow0(first, first + count).clone();
}

// The mean over `count` rows of the squared error: a loss whose `counted` is its row count.
MicroBatchLoss squared_error(Toy& m, int64_t k, int64_t first, int64_t count, bool use_spare = false) {
  const Tensor x = rows_of(100 + static_cast<uint64_t>(k), first, count, 4);
  const Tensor t = rows_of(200 + static_cast<uint64_t>(k), first, count, 3);
  const Tensor y = add(matmul(tanh(matmul(x, m.w1)), m.w2), m.b);
  const Tensor d = sub(y, t);
  Tensor sum = sum_all(mul(d, d));
  if (use_spare) sum = add(sum, sum_all(mul(m.spare, m.spare)));
  MicroBatchLoss out;
  out.loss = scale(sum, 1.0f / static_cast<float>(count));
  out.counted = count;
  out.nll = sum.item();
  out.tokens = count;
  return out;
}

std::vector<std::vector<float>> values(const Toy& m) {
  std::vector<std::vector<float>> v;
  for (Tensor* p : m.parameters()) v.push_back(p->to_vector());
  return v;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

double max_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) d = std::max(d, std::fabs(static_cast<double>(a[i][j]) - b[i][j]));
  return d;
}

// Micro-batch k's 16 rows are split 5 / 11 between two ranks (shares of different lengths).
constexpr int64_t kMicroBatches = 3;
constexpr int64_t kRows = 16, kRank0Rows = 5;

std::vector<std::vector<float>> optimizer_values(const AdamWState& st);

struct RankRun {
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> state;  // the optimizer's moments and step counts (ZeRO-1: gathered)
  StepResult result;                // of the last step
  std::vector<StepResult> results;  // of every step (settled at the end when deferred)
  int gradients_left = 0;  // parameters still holding a gradient after the last step
};

// `steps` steps on `world` ranks; forward(rank, model, k) gives rank's micro-batch k.
using Forward = std::function<std::optional<MicroBatchLoss>(int, Toy&, int64_t)>;
std::vector<RankRun> train(int world, const TrainStepOptions& options, const Forward& forward, int steps = 2) {
  const auto comms = kernels::cpu::thread_communicators(world);
  std::vector<RankRun> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Toy m;
      TrainStep step(m, *comms[static_cast<size_t>(r)], *comms[static_cast<size_t>(r)], options);
      std::vector<StepResult>& results = out[static_cast<size_t>(r)].results;
      for (int s = 0; s < steps; ++s)
        results.push_back(
            step.run(kMicroBatches, kMicroBatches * kRows, [&](int64_t k) { return forward(r, m, k); }, 1e-2f));
      if (step.defers()) results = step.settle();
      out[static_cast<size_t>(r)].result = results.back();
      out[static_cast<size_t>(r)].params = values(m);
      out[static_cast<size_t>(r)].state =
          optimizer_values(step.sharded() ? step.sharded()->gather_state() : step.optimizer()->state());
      for (Tensor* p : m.parameters()) out[static_cast<size_t>(r)].gradients_left += p->grad().defined();
    });
  for (auto& t : threads) t.join();
  return out;
}

std::optional<MicroBatchLoss> whole_batch(int, Toy& m, int64_t k) { return squared_error(m, k, 0, kRows); }
std::optional<MicroBatchLoss> shared_batch(int rank, Toy& m, int64_t k) {
  return rank == 0 ? squared_error(m, k, 0, kRank0Rows) : squared_error(m, k, kRank0Rows, kRows - kRank0Rows);
}

TEST(TrainStep, TwoRanksTakeTheStepOfOneRankOverTheWholeBatch) {
  TrainStepOptions o;
  o.clip_norm = 1.0f;
  const auto one = train(1, o, whole_batch);
  const auto two = train(2, o, shared_batch);
  EXPECT_TRUE(same_bits(two[0].params, two[1].params)) << "the replicas diverged";
  // The same mean loss and gradient, summed in another order: equal to f32 rounding.
  EXPECT_LT(max_difference(one[0].params, two[0].params), 1e-6);
  EXPECT_NEAR(two[0].result.loss_sum, one[0].result.loss_sum, 1e-4 * std::fabs(one[0].result.loss_sum));
  EXPECT_EQ(two[0].result.tokens, kMicroBatches * kRows);
  EXPECT_EQ(two[1].result.tokens, kMicroBatches * kRows);
  EXPECT_TRUE(two[0].result.applied());
  EXPECT_NEAR(two[0].result.grad_norm, one[0].result.grad_norm, 1e-5 * one[0].result.grad_norm);
}

TEST(TrainStep, OverlapAndBucketSizesGiveTheSameBits) {
  TrainStepOptions plain;
  plain.overlap_communication = false;
  const auto reference = train(2, plain, shared_batch);
  for (int64_t bucket : {int64_t{4}, int64_t{64}, GradientSync::kDefaultBucketBytes}) {
    TrainStepOptions o;
    o.bucket_bytes = bucket;
    const auto got = train(2, o, shared_batch);
    EXPECT_TRUE(same_bits(got[0].params, reference[0].params)) << "bucket " << bucket;
  }
}

TEST(TrainStep, ZeroOneGivesThePlainOptimizersParameters) {
  TrainStepOptions plain, zero;
  zero.shard_optimizer = true;
  // Without clipping the update is the same arithmetic on the same sums: the same bits.
  EXPECT_TRUE(same_bits(train(2, zero, shared_batch)[0].params, train(2, plain, shared_batch)[0].params));
  // With clipping the norm is summed in another order: the clip factor may move in its last bit.
  plain.clip_norm = zero.clip_norm = 0.05f;
  EXPECT_LT(max_difference(train(2, zero, shared_batch)[1].params, train(2, plain, shared_batch)[1].params), 1e-6);
}

TEST(TrainStep, AParameterOnlyOneRankUsesGetsThatRanksGradient) {
  const Forward spare_on_rank0 = [](int rank, Toy& m, int64_t k) {
    return rank == 0 ? squared_error(m, k, 0, kRank0Rows, true) : squared_error(m, k, kRank0Rows, kRows - kRank0Rows);
  };
  const Toy fresh;
  const std::vector<float> before = fresh.spare.to_vector();
  for (bool shard : {false, true}) {
    TrainStepOptions o;
    o.shard_optimizer = shard;
    const auto got = train(2, o, spare_on_rank0, 1);
    EXPECT_NE(got[1].params[3], before) << "rank 1 did not receive rank 0's gradient, shard " << shard;
    EXPECT_EQ(got[0].params[3], got[1].params[3]) << "shard " << shard;
  }
}

TEST(TrainStep, ANonFiniteLossOnOneRankSkipsTheStepOnEveryRank) {
  const Toy fresh;
  const auto before = values(fresh);
  const Forward nan_on_rank1 = [](int rank, Toy& m, int64_t k) {
    std::optional<MicroBatchLoss> l = shared_batch(rank, m, k);
    if (rank == 1 && k == 1) l->loss = mul(l->loss, Tensor::full(Shape{}, std::numeric_limits<float>::quiet_NaN()));
    return l;
  };
  for (bool shard : {false, true}) {
    TrainStepOptions o;
    o.shard_optimizer = shard;
    const auto got = train(2, o, nan_on_rank1, 1);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(got[static_cast<size_t>(r)].result.outcome, StepOutcome::nonfinite_loss) << "rank " << r;
      EXPECT_TRUE(same_bits(got[static_cast<size_t>(r)].params, before)) << "rank " << r << " updated";
    }
  }
}

TEST(TrainStep, ADivergedMeanLossSkipsTheStepAndZeroesTheGradients) {
  const auto before = values(Toy());
  const Forward diverging = [](int, Toy& m, int64_t k) {
    std::optional<MicroBatchLoss> l = squared_error(m, k, 0, kRows);
    l->loss = add(l->loss, Tensor::full(Shape{}, 1000.0f));  // a mean over 700 nats per token
    return l;
  };
  const RankRun r = train(1, TrainStepOptions{}, diverging, 1)[0];
  EXPECT_EQ(r.result.outcome, StepOutcome::nonfinite_loss);
  EXPECT_STREQ(step_outcome_name(r.result.outcome), "non-finite or diverged loss");
  EXPECT_TRUE(same_bits(r.params, before));
  EXPECT_EQ(r.gradients_left, 0);
}

TEST(TrainStep, ANonFiniteGradientNormSkipsTheStep) {
  const auto before = values(Toy());
  // sqrt at 0 is finite; its derivative is not.
  const Forward infinite_gradient = [](int, Toy& m, int64_t) {
    MicroBatchLoss l;
    l.loss = sum_all(sqrt(mul(m.b, Tensor::full(Shape{3}, 0.0f))));
    l.counted = 1;
    return std::optional<MicroBatchLoss>(l);
  };
  const RankRun r = train(1, TrainStepOptions{}, infinite_gradient, 1)[0];
  EXPECT_EQ(r.result.outcome, StepOutcome::nonfinite_gradient);
  EXPECT_TRUE(same_bits(r.params, before));
  EXPECT_EQ(r.gradients_left, 0);
}

// Deferred results (TrainStepOptions::defer_results, automatic on a CUDA device, forced here
// on the CPU): run() reads nothing and returns pending; settle() then gives what the immediate
// step gives, bit for bit, and the parameters are the same.
std::vector<StepResult> run_steps(Toy& m, TrainStep& step, const Forward& forward, int steps) {
  std::vector<StepResult> out;
  for (int s = 0; s < steps; ++s) {
    out.push_back(step.run(kMicroBatches, kMicroBatches * kRows, [&](int64_t k) { return forward(0, m, k); }, 1e-2f));
    if (step.defers()) {
      EXPECT_TRUE(out.back().pending()) << "step " << s;
      EXPECT_EQ(out.back().tokens, kMicroBatches * kRows);
    }
  }
  if (step.defers()) {
    EXPECT_EQ(step.pending_steps(), steps);
    out = step.settle();
    EXPECT_EQ(step.pending_steps(), 0);
    EXPECT_TRUE(step.settle().empty());
  }
  return out;
}

// A forward that counts the steps (each starts with micro-batch 0; an immediate step stops at a
// bad loss): step s, micro-batch k gives whole_batch's loss changed by change(s, k, loss).
using LossChange = std::function<Tensor(int step, int64_t k, const Tensor& loss)>;
Forward counting_forward(const LossChange& change) {
  auto steps = std::make_shared<int>(-1);
  return [steps, change](int rank, Toy& m, int64_t k) {
    if (k == 0) ++*steps;
    const int step = *steps;
    std::optional<MicroBatchLoss> l = whole_batch(rank, m, k);
    l->loss = change(step, k, l->loss);
    return l;
  };
}

void expect_deferred_equals_immediate(const LossChange& change, int steps, float clip_norm) {
  const Forward forward_a = counting_forward(change), forward_b = counting_forward(change);
  const auto comm = kernels::solo_communicator();
  TrainStepOptions at_once, later;
  at_once.clip_norm = later.clip_norm = clip_norm;
  at_once.defer_results = TrainStepOptions::Defer::no;
  later.defer_results = TrainStepOptions::Defer::yes;
  Toy a, b;
  TrainStep sa(a, *comm, *comm, at_once), sb(b, *comm, *comm, later);
  ASSERT_FALSE(sa.defers());
  ASSERT_TRUE(sb.defers());
  const std::vector<StepResult> ra = run_steps(a, sa, forward_a, steps), rb = run_steps(b, sb, forward_b, steps);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(rb[i].outcome, ra[i].outcome) << "step " << i;
    EXPECT_EQ(rb[i].grad_norm, ra[i].grad_norm) << "step " << i;
    // A bad loss ends an immediate step's forwards early; a deferred step runs them all (it
    // does not know): the counts and sums of such a step mean nothing either way.
    if (ra[i].outcome != StepOutcome::nonfinite_loss) {
      EXPECT_EQ(rb[i].tokens, ra[i].tokens) << "step " << i;
      EXPECT_EQ(rb[i].loss_sum, ra[i].loss_sum) << "step " << i;
      EXPECT_EQ(rb[i].nll_sum, ra[i].nll_sum) << "step " << i;
    }
  }
  EXPECT_TRUE(same_bits(values(a), values(b)));
  EXPECT_EQ(sa.optimizer()->step_count(), sb.optimizer()->step_count());
  for (Tensor* p : b.parameters()) EXPECT_FALSE(p->grad().defined()) << "gradients are zeroed after every step";
}

// The step before issue 51, as the reference: each micro-batch's backward weighted by its
// share, the global norm (global_grad_norm), the factor (clip_factor), then AdamW per tensor
// (AdamW::step, its moments in tensors of their own) reading each gradient times the factor.
struct TodaysStep {
  Toy m;
  AdamW opt{m.named_parameters(), AdamWOptions{}};
  void run(const Forward& forward, float clip_norm, int steps) {
    for (int s = 0; s < steps; ++s) {
      for (int64_t k = 0; k < kMicroBatches; ++k) {
        const std::optional<MicroBatchLoss> l = forward(0, m, k);
        l->loss.backward(Tensor::full(Shape{}, static_cast<float>(l->counted) / static_cast<float>(kMicroBatches * kRows)));
      }
      const float factor = clip_factor(global_grad_norm(m.parameters()), clip_norm);
      opt.set_lr(1e-2f);
      opt.step(factor);
      m.zero_grad();
    }
  }
};

// Parameters and moments as one list of vectors (AdamWState's map is ordered by name).
std::vector<std::vector<float>> optimizer_values(const AdamWState& st) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, p] : st.params) {
    v.push_back(p.exp_avg.to_vector());
    v.push_back(p.exp_avg_sq.to_vector());
    v.push_back({static_cast<float>(p.step)});
  }
  return v;
}

// Issue 51's equality: the step with the fused update over the arena (one rank; deferred or
// not) leaves the parameters and the optimizer state of today's step bit for bit on the CPU;
// two ranks with ZeRO-1 sum the gradients and the norm in another order, so they agree to the
// f32 rounding of those sums: each gradient element is a sum of 2 rank partials of at most 3
// micro-batch terms, |error| <= 4 u |g| (u = 2^-24), which AdamW's scale-free m / sqrt(v) passes
// to each update as 2 x 4 u of the step lr = 1e-2 (and the clip factor's last bit, u, alike):
// after 4 steps at most 4 x 1e-2 x 9 u ~ 2.2e-8, beside the parameters' own f32 rounding of
// each update (2 u |w|, |w| < 4: 4 x 4.8e-7): 2e-6 covers both.
TEST(TrainStep, TheFusedStepLeavesTodaysParametersAndStateOneRankBitForBitZeroOneWithinRounding) {
  constexpr int kSteps = 4;
  for (const float clip : {0.0f, 0.05f}) {
    TodaysStep today;
    today.run(whole_batch, clip, kSteps);
    ASSERT_FALSE(same_bits(values(today.m), values(Toy()))) << "the steps should move the parameters";
    for (const TrainStepOptions::Defer defer : {TrainStepOptions::Defer::no, TrainStepOptions::Defer::yes}) {
      const auto comm = kernels::solo_communicator();
      TrainStepOptions o;
      o.clip_norm = clip;
      o.defer_results = defer;
      Toy m;
      TrainStep step(m, *comm, *comm, o);
      run_steps(m, step, whole_batch, kSteps);
      EXPECT_TRUE(same_bits(values(m), values(today.m))) << "clip " << clip;
      EXPECT_TRUE(same_bits(optimizer_values(step.optimizer()->state()), optimizer_values(today.opt.state())))
          << "clip " << clip;
    }
    TrainStepOptions zero;
    zero.clip_norm = clip;
    zero.shard_optimizer = true;
    const auto two = train(2, zero, shared_batch, kSteps);
    EXPECT_TRUE(same_bits(two[0].params, two[1].params)) << "the replicas diverged";
    EXPECT_LT(max_difference(two[0].params, values(today.m)), 2e-6) << "clip " << clip;
    const std::vector<std::vector<float>> state = optimizer_values(today.opt.state());
    EXPECT_LT(max_difference(two[1].state, state), 2e-6) << "clip " << clip;
    for (size_t i = 2; i < state.size(); i += 3) EXPECT_EQ(two[1].state[i], state[i]) << "step counts";
  }
}

// ZeRO-1 as it was before its norm and update moved to the device (issue 51), the reference for
// the fused one: TrainStep's weighted backwards, the arena's gradients reduce-scattered, the
// shard's sum_squares read back and summed over the ranks on the host, the clip factor there,
// then adamw_step on each parameter's part of the shard, and the values all-gathered. Returns
// each rank's parameters and gathered state (as `train` does).
std::vector<RankRun> todays_zero_one(float clip_norm, int steps) {
  constexpr int kWorld = 2;
  const auto comms = kernels::cpu::thread_communicators(kWorld);
  std::vector<RankRun> out(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank)
    threads.emplace_back([&, rank] {
      kernels::Communicator& comm = *comms[static_cast<size_t>(rank)];
      Toy m;
      const ParameterArena& arena = m.flatten_parameters(kWorld);
      const int64_t shard = arena.size() / kWorld, begin = shard * rank;
      std::vector<float> g(static_cast<size_t>(shard)), mo(static_cast<size_t>(arena.size())), ve(mo.size());
      struct Slot {
        std::string name;
        Tensor* p;
        size_t range;
        int64_t step = 0;
      };
      std::vector<Slot> slots;
      for (const auto& [name, p] : m.named_parameters())
        slots.push_back({name, p, static_cast<size_t>(arena.range_of(*p))});
      for (int s = 0; s < steps; ++s) {
        for (int64_t k = 0; k < kMicroBatches; ++k) {
          const std::optional<MicroBatchLoss> l = shared_batch(rank, m, k);
          const float share = static_cast<float>(l->counted) / static_cast<float>(kMicroBatches * kRows);
          l->loss.backward(Tensor::full(Shape{}, share));
        }
        std::vector<double> mask;
        for (const Slot& slot : slots) mask.push_back(slot.p->grad().defined() ? 1.0 : 0.0);
        comm.all_reduce_host(mask.data(), static_cast<int64_t>(mask.size()), kernels::ReduceOp::max);
        for (const Slot& slot : slots) arena.settle_grad(slot.range);
        comm.reduce_scatter_sum(arena.grads().data<float>(), g.data(), shard);
        double sum = kernels::cpu::sum_squares(g.data(), shard);
        comm.all_reduce_host(&sum, 1, kernels::ReduceOp::sum);
        const float factor = clip_norm > 0 ? clip_factor(std::sqrt(sum), clip_norm) : 1.0f;
        float* vals = arena.values().data<float>();
        for (size_t i = 0; i < slots.size(); ++i) {
          if (mask[i] == 0.0) continue;
          Slot& slot = slots[i];
          ++slot.step;
          const int64_t off = arena.ranges()[slot.range].offset, n = slot.p->numel();
          const int64_t lo = std::max(off, begin), hi = std::min(off + n, begin + shard);
          if (lo >= hi) continue;
          kernels::cpu::AdamWHyper h = adamw_hyper(AdamWOptions{}, decays_unless_bias_or_norm(slot.name), slot.step);
          h.lr = 1e-2f;
          h.grad_scale = factor;
          kernels::cpu::adamw_step(vals + lo, g.data() + (lo - begin), mo.data() + lo, ve.data() + lo, hi - lo, h);
        }
        comm.all_gather(vals + begin, vals, shard);
        m.zero_grad();
      }
      comm.all_gather(mo.data() + begin, mo.data(), shard);
      comm.all_gather(ve.data() + begin, ve.data(), shard);
      AdamWState st;
      for (const Slot& slot : slots) {
        const int64_t off = arena.ranges()[slot.range].offset, n = slot.p->numel();
        const auto part = [&](const std::vector<float>& v) {
          Tensor t = Tensor::zeros(slot.p->shape());
          std::copy(v.begin() + off, v.begin() + off + n, t.data<float>());
          return t;
        };
        st.params[slot.name] = {part(mo), part(ve), slot.step};
      }
      out[static_cast<size_t>(rank)].params = values(m);
      out[static_cast<size_t>(rank)].state = optimizer_values(st);
    });
  for (auto& t : threads) t.join();
  return out;
}

// ZeRO-1's norm and update on the device (sum_squares_into, an all-gather of the ranks' sums,
// adamw_fused_update over the shard's ranges) give today's ZeRO-1 parameters and moments bit for
// bit, immediate or deferred: the same shard sums, added in the same rank order, the same clip
// factor and the same per-element arithmetic with the same scalars.
TEST(TrainStep, ZeroOnesFusedUpdateIsTodaysZeroOneBitForBit) {
  for (const float clip : {0.0f, 0.05f}) {
    const auto today = todays_zero_one(clip, 4);
    for (const TrainStepOptions::Defer defer : {TrainStepOptions::Defer::no, TrainStepOptions::Defer::yes}) {
      TrainStepOptions o;
      o.clip_norm = clip;
      o.shard_optimizer = true;
      o.defer_results = defer;
      const auto fused = train(2, o, shared_batch, 4);
      for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(same_bits(fused[static_cast<size_t>(r)].params, today[static_cast<size_t>(r)].params))
            << "rank " << r << " clip " << clip;
        EXPECT_TRUE(same_bits(fused[static_cast<size_t>(r)].state, today[static_cast<size_t>(r)].state))
            << "rank " << r << " clip " << clip;
      }
      for (const StepResult& step : fused[0].results) EXPECT_TRUE(step.applied());
    }
  }
}

TEST(TrainStep, DeferredResultsAreTheImmediateOnesReadLater) {
  const LossChange none = [](int, int64_t, const Tensor& loss) { return loss; };
  expect_deferred_equals_immediate(none, 3, 0.0f);
  expect_deferred_equals_immediate(none, 3, 0.05f);  // clipped every step
}

TEST(TrainStep, DeferredBadStepsAreSkippedWhereTheyRunAndReportedBySettle) {
  // Step 2 (of 4) has a NaN loss in its second micro-batch, step 3 a diverged mean.
  const LossChange bad_steps = [](int step, int64_t k, const Tensor& loss) {
    if (step == 1 && k == 1) return mul(loss, Tensor::full(Shape{}, std::numeric_limits<float>::quiet_NaN()));
    if (step == 2) return add(loss, Tensor::full(Shape{}, 1000.0f));
    return loss;
  };
  expect_deferred_equals_immediate(bad_steps, 4, 1.0f);
  const auto comm = kernels::solo_communicator();
  TrainStepOptions o;
  o.defer_results = TrainStepOptions::Defer::yes;
  Toy m;
  TrainStep step(m, *comm, *comm, o);
  const std::vector<StepResult> r = run_steps(m, step, counting_forward(bad_steps), 4);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].outcome, StepOutcome::applied);
  EXPECT_EQ(r[1].outcome, StepOutcome::nonfinite_loss);
  EXPECT_EQ(r[2].outcome, StepOutcome::nonfinite_loss);
  EXPECT_EQ(r[3].outcome, StepOutcome::applied);
  EXPECT_EQ(step.optimizer()->step_count(), 2) << "the two bad steps left the update counts alone";
}

TEST(TrainStep, ADeferredNonFiniteGradientNormSkipsTheStep) {
  const auto before = values(Toy());
  const Forward infinite_gradient = [](int, Toy& m, int64_t) {
    MicroBatchLoss l;
    l.loss = sum_all(sqrt(mul(m.b, Tensor::full(Shape{3}, 0.0f))));
    l.counted = 1;
    l.tokens = kRows;
    return std::optional<MicroBatchLoss>(l);
  };
  const auto comm = kernels::solo_communicator();
  TrainStepOptions o;
  o.defer_results = TrainStepOptions::Defer::yes;
  Toy m;
  TrainStep step(m, *comm, *comm, o);
  const std::vector<StepResult> r = run_steps(m, step, infinite_gradient, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].outcome, StepOutcome::nonfinite_gradient);
  EXPECT_TRUE(same_bits(values(m), before));
  EXPECT_EQ(step.optimizer()->step_count(), 0);
}

// More pending steps than the records kept where the step runs: the oldest are read back early
// and handed out, in order, by the next settle().
TEST(TrainStep, MoreDeferredStepsThanRecordsAreSettledInOrder) {
  const LossChange nan_at_step_66 = [](int step, int64_t, const Tensor& loss) {
    return step == 66 ? mul(loss, Tensor::full(Shape{}, std::numeric_limits<float>::quiet_NaN())) : loss;
  };
  expect_deferred_equals_immediate(nan_at_step_66, 70, 1.0f);  // past the 64 records
}

// Several ranks defer too (issue 51): each rank's record is all-gathered where the step runs
// and added there in rank order, the host agreeing only on tokens and the gradient mask. The
// results settle() gives on each rank, the parameters and the optimizer state are the immediate
// step's bit for bit, plain and ZeRO-1, with a NaN loss on one rank only (every rank skips that
// step: ZeRO-1's update skips itself on the device).
TEST(TrainStep, DeferredStepsOnTwoRanksAreTheImmediateOnesReadLater) {
  const auto forward = [] {
    auto steps = std::make_shared<std::array<int, 2>>(std::array<int, 2>{-1, -1});  // each rank's own
    return Forward([steps](int rank, Toy& m, int64_t k) {
      int& step = (*steps)[static_cast<size_t>(rank)];
      if (k == 0) ++step;
      std::optional<MicroBatchLoss> l = shared_batch(rank, m, k);
      if (rank == 1 && step == 1 && k == 1)
        l->loss = mul(l->loss, Tensor::full(Shape{}, std::numeric_limits<float>::quiet_NaN()));
      return l;
    });
  };
  for (const bool shard : {false, true}) {
    for (const float clip : {0.0f, 0.05f}) {
      TrainStepOptions at_once, later;
      at_once.clip_norm = later.clip_norm = clip;
      at_once.shard_optimizer = later.shard_optimizer = shard;
      at_once.defer_results = TrainStepOptions::Defer::no;
      later.defer_results = TrainStepOptions::Defer::yes;
      const auto a = train(2, at_once, forward(), 4), b = train(2, later, forward(), 4);
      for (int r = 0; r < 2; ++r) {
        const RankRun &x = a[static_cast<size_t>(r)], &y = b[static_cast<size_t>(r)];
        ASSERT_EQ(y.results.size(), 4u);
        for (size_t i = 0; i < 4; ++i) {
          EXPECT_EQ(y.results[i].outcome, x.results[i].outcome) << "rank " << r << " step " << i;
          EXPECT_EQ(y.results[i].grad_norm, x.results[i].grad_norm) << "rank " << r << " step " << i;
          if (!x.results[i].applied()) continue;  // a bad step's sums mean nothing
          EXPECT_EQ(y.results[i].tokens, x.results[i].tokens) << "rank " << r << " step " << i;
          EXPECT_EQ(y.results[i].loss_sum, x.results[i].loss_sum) << "rank " << r << " step " << i;
          EXPECT_EQ(y.results[i].nll_sum, x.results[i].nll_sum) << "rank " << r << " step " << i;
        }
        EXPECT_EQ(x.results[1].outcome, StepOutcome::nonfinite_loss);
        EXPECT_TRUE(same_bits(y.params, x.params)) << "rank " << r << " clip " << clip << " ZeRO-1 " << shard;
        EXPECT_TRUE(same_bits(y.state, x.state)) << "rank " << r << " clip " << clip << " ZeRO-1 " << shard;
      }
    }
  }
}

TEST(TrainStep, ARankWithEmptySharesStillJoinsTheStep) {
  const Forward rank1_empty = [](int rank, Toy& m, int64_t k) -> std::optional<MicroBatchLoss> {
    if (rank == 1) return std::nullopt;
    return squared_error(m, k, 0, kRows);
  };
  const auto got = train(2, TrainStepOptions{}, rank1_empty);
  const auto alone = train(1, TrainStepOptions{}, whole_batch);
  EXPECT_TRUE(same_bits(got[0].params, got[1].params));
  EXPECT_LT(max_difference(got[1].params, alone[0].params), 1e-6);
  EXPECT_EQ(got[1].result.tokens, kMicroBatches * kRows);
}

}  // namespace
}  // namespace tarn
