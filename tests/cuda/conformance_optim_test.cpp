// CUDA optimizer kernels against the CPU kernels, the device Philox against framework/rng.h,
// and the promise that every reduction gives the same bits in every thread order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/rng.h"
#include "kernels/cuda/philox.cuh"
#include "kernels/layer_norm.h"
#include "kernels/optim.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

constexpr int64_t kN = 37 * 129;

class OptimConformance : public Conformance {};

// One side's AdamW trajectory of one element (kernels/cpu/optim.cpp, kernels/cuda/optim.cu: the
// same formula; the step's scalars are the same floats, folded in double on the host), with
// its error bound carried from step to step (each side goes on from its own p, m, v).
struct AdamWElement {
  Bounded p, m, v;
  void Step(float g_in, const kernels::cpu::AdamWHyper& h) {
    const double t = static_cast<double>(h.step);
    const double decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
    const double step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
    const double bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
    const double one_b1 = 1.0f - h.beta1, one_b2 = 1.0f - h.beta2;
    const Bounded g = Exact(*p.r, g_in);
    m = h.beta1 * m + one_b1 * g;
    v = h.beta2 * v + one_b2 * (g * g);
    const Bounded denom = Sqrt(v) / bc2_sqrt + h.eps;
    p = p * decay - step_size * (m / denom);
  }
};

TEST_P(OptimConformance, AdamWStepMatchesCpuOverSeveralSteps) {
  auto p = Random(kN, -1.0f, 1.0f, 300);
  std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
  auto dp = dev(p), dm = dev(m), dv = dev(v);
  std::vector<AdamWElement> on_device(kN), on_cpu(kN);
  for (int64_t i = 0; i < kN; ++i) {
    on_device[i] = {Exact(kCudaF32, p[i]), Exact(kCudaF32, 0.0), Exact(kCudaF32, 0.0)};
    on_cpu[i] = {Exact(kCpuF32, p[i]), Exact(kCpuF32, 0.0), Exact(kCpuF32, 0.0)};
  }
  kernels::cpu::AdamWHyper h;
  h.lr = 3e-3f;
  h.weight_decay = 0.01f;
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = Random(kN, -0.1f, 0.1f, 310 + static_cast<uint32_t>(step));
    h.step = step;
    kernels::cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), kN, h);
    auto dg = dev(g);
    TARN_ON(target(), adamw_step, dp.get(), dg.get(), dm.get(), dv.get(), kN, h);
    for (int64_t i = 0; i < kN; ++i) on_device[i].Step(g[i], h), on_cpu[i].Step(g[i], h);
  }
  // Per side and step: 3 roundings of m, 4 of v, sqrt, the division by sqrt(1 - b2^t), + eps,
  // m / denom and the update of p, each carried into the next step.
  std::vector<double> bound_p(kN), bound_m(kN), bound_v(kN);
  for (int64_t i = 0; i < kN; ++i) {
    bound_p[i] = on_device[i].p.err + on_cpu[i].p.err;
    bound_m[i] = on_device[i].m.err + on_cpu[i].m.err;
    bound_v[i] = on_device[i].v.err + on_cpu[i].v.err;
  }
  EXPECT_TRUE(WithinBound(dp.host(), p, bound_p));
  EXPECT_TRUE(WithinBound(dm.host(), m, bound_m));
  EXPECT_TRUE(WithinBound(dv.host(), v, bound_v));
}

TEST_P(OptimConformance, SumSquaresMatchesCpuAcrossItsBlocks) {
  for (int64_t n : {int64_t{1}, kN, int64_t{3 * kernels::cpu::kSumSquaresBlock + 17}}) {
    const auto x = Random(n, -1.0f, 1.0f, 320);
    const double want = kernels::cpu::sum_squares(x.data(), n);
    auto dx = dev(x);
    const double got = TARN_ON(target(), sum_squares, dx.get(), n);
    // Squares of floats are exact in double; each side sums the n positive terms in double in
    // its own order: within gamma_{n-1}(2^-53) of the sum.
    EXPECT_TRUE(WithinBound(got, want, 2 * Gamma(n - 1, kF64) * want)) << "n " << n;
  }
}

TEST_P(OptimConformance, ScaleInplaceMatchesCpu) {
  auto x = Random(kN, -1.0f, 1.0f, 330);
  auto dx = dev(x);
  kernels::cpu::scale_inplace(x.data(), kN, 0.37f);
  TARN_ON(target(), scale_inplace, dx.get(), kN, 0.37f);
  EXPECT_TRUE(BitwiseEqual(dx.host(), x));
}

// Clipping folded into the update (AdamWHyper::grad_scale) reads g * s where scale_inplace
// would have stored g * s: the same f32 product, so the same bits as scaling first.
TEST_P(OptimConformance, AdamWWithAGradScaleHasTheBitsOfScalingTheGradientFirst) {
  const auto p = Random(kN, -1.0f, 1.0f, 330);
  const std::vector<float> zeros(kN, 0.0f);
  auto p_scaled = dev(p), m_scaled = dev(zeros), v_scaled = dev(zeros);
  auto p_fused = dev(p), m_fused = dev(zeros), v_fused = dev(zeros);
  kernels::cpu::AdamWHyper h;
  h.lr = 3e-3f;
  h.weight_decay = 0.01f;
  const float factor = 0.3712f;
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g = Random(kN, -0.1f, 0.1f, 340 + static_cast<uint32_t>(step));
    h.step = step;
    auto g_scaled = dev(g), g_fused = dev(g);
    TARN_ON(target(), scale_inplace, g_scaled.get(), kN, factor);
    TARN_ON(target(), adamw_step, p_scaled.get(), g_scaled.get(), m_scaled.get(), v_scaled.get(), kN, h);
    kernels::cpu::AdamWHyper fused = h;
    fused.grad_scale = factor;
    TARN_ON(target(), adamw_step, p_fused.get(), g_fused.get(), m_fused.get(), v_fused.get(), kN, fused);
  }
  EXPECT_TRUE(BitwiseEqual(p_fused.host(), p_scaled.host()));
  EXPECT_TRUE(BitwiseEqual(m_fused.host(), m_scaled.host()));
  EXPECT_TRUE(BitwiseEqual(v_fused.host(), v_scaled.host()));
}

// A small arena for adamw_fused_step: ranges with and without weight decay, one of several
// sum-of-squares blocks, an empty one, one without a gradient, alignment gaps between them.
struct FusedArena {
  std::vector<kernels::cpu::AdamWRange> ranges;
  int64_t size = 0, blocks = 0;
  FusedArena() {
    const int64_t sizes[] = {3 * kernels::cpu::kSumSquaresBlock + 70, 37, 0, 4096, 5};
    const float decays[] = {0.01f, 0.0f, 0.0f, 0.01f, 0.01f};
    const int32_t grads[] = {1, 1, 1, 1, 0};
    for (int i = 0; i < 5; ++i) {
      kernels::cpu::AdamWRange r;
      r.offset = (size + 63) / 64 * 64;
      r.numel = sizes[i];
      r.weight_decay = decays[i];
      r.has_grad = grads[i];
      ranges.push_back(r);
      size = r.offset + r.numel;
    }
    blocks = kernels::cpu::adamw_fused_layout(ranges.data(), static_cast<int64_t>(ranges.size()));
  }
};

kernels::cpu::AdamWFusedHyper FusedHyper(float max_norm) {
  kernels::cpu::AdamWFusedHyper h;
  h.lr = 3e-3f;
  h.max_norm = max_norm;
  return h;
}

// The fused update against the per-tensor path on the same target (each range's sum_squares
// read back and added in order on the host, clip_scale there, adamw_step per range with the
// host's scalars): the same norm and factor bits, and the same parameters and moments, bit for
// bit under the emulator (whose pow is the host's); on a GPU the device's pow may move a bias
// correction's f32 rounding, so there within a few ulps.
TEST_P(OptimConformance, AdamWFusedStepHasThePerTensorPathsBits) {
  const FusedArena arena;
  for (const float max_norm : {0.0f, 0.5f, 1e6f}) {
    SCOPED_TRACE(max_norm);
    const auto p0 = Random(static_cast<size_t>(arena.size), -1.0f, 1.0f, 350);
    const std::vector<float> zeros(static_cast<size_t>(arena.size), 0.0f);
    auto fp = dev(p0), fm = dev(zeros), fv = dev(zeros);  // fused
    auto rp = dev(p0), rm = dev(zeros), rv = dev(zeros);  // per range
    auto ranges = dev(arena.ranges);
    auto state = dev(std::vector<kernels::cpu::AdamWRangeState>(arena.ranges.size()));
    auto applied = dev(std::vector<int64_t>{0});
    auto outcome = dev(std::vector<kernels::cpu::AdamWOutcome>(1));
    const kernels::cpu::AdamWFusedHyper h = FusedHyper(max_norm);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = Random(static_cast<size_t>(arena.size), -0.3f, 0.3f, 360 + static_cast<uint32_t>(step));
      auto dg = dev(g);
      TARN_ON(target(), adamw_fused_step, fp.get(), dg.get(), fm.get(), fv.get(), ranges.get(), state.get(),
              static_cast<int64_t>(arena.ranges.size()), arena.blocks, h, nullptr, applied.get(), outcome.get());
      double total = 0.0;
      for (const auto& r : arena.ranges)
        if (r.has_grad) total += TARN_ON(target(), sum_squares, dg.get() + r.offset, r.numel);
      const double norm = std::sqrt(total);
      const kernels::cpu::AdamWOutcome got = outcome.host()[0];
      EXPECT_EQ(got.applied, 1);
      EXPECT_EQ(std::memcmp(&got.norm, &norm, sizeof norm), 0) << "step " << step << ": " << got.norm << " vs " << norm;
      EXPECT_EQ(got.scale, kernels::cpu::clip_scale(norm, max_norm)) << "step " << step;
      for (const auto& r : arena.ranges) {
        if (!r.has_grad) continue;
        kernels::cpu::AdamWHyper hr;
        hr.lr = h.lr;
        hr.weight_decay = r.weight_decay;
        hr.step = step;
        hr.grad_scale = kernels::cpu::clip_scale(norm, max_norm);
        TARN_ON(target(), adamw_step, rp.get() + r.offset, dg.get() + r.offset, rm.get() + r.offset,
                rv.get() + r.offset, r.numel, hr);
      }
    }
    EXPECT_EQ(applied.host()[0], 3);
    const auto st = state.host();
    for (size_t i = 0; i < st.size(); ++i) EXPECT_EQ(st[i].step, arena.ranges[i].has_grad ? 3 : 0) << "range " << i;
    if (target() == Target::gpu) {
      EXPECT_TRUE(AllClose(fp.host(), rp.host(), 1e-6f, 1e-9f));
      EXPECT_TRUE(AllClose(fm.host(), rm.host(), 1e-6f, 1e-12f));
      EXPECT_TRUE(AllClose(fv.host(), rv.host(), 1e-6f, 1e-15f));
    } else {
      EXPECT_TRUE(BitwiseEqual(fp.host(), rp.host()));
      EXPECT_TRUE(BitwiseEqual(fm.host(), rm.host()));
      EXPECT_TRUE(BitwiseEqual(fv.host(), rv.host()));
    }
    const auto untouched = rp.host();  // the range without a gradient kept its values
    const auto& last = arena.ranges.back();
    for (int64_t i = 0; i < last.numel; ++i) EXPECT_EQ(untouched[last.offset + i], p0[last.offset + i]);
  }
}

// A gradient that is not finite, or the skip flag, leaves everything as it was: parameters,
// moments, the ranges' steps and the applied count; the outcome says so.
TEST_P(OptimConformance, AdamWFusedStepSkipsOnABadNormOrTheFlag) {
  const FusedArena arena;
  const auto p0 = Random(static_cast<size_t>(arena.size), -1.0f, 1.0f, 370);
  const auto m0 = Random(static_cast<size_t>(arena.size), -0.1f, 0.1f, 371);
  const auto v0 = Random(static_cast<size_t>(arena.size), 0.0f, 0.01f, 372);
  std::vector<kernels::cpu::AdamWRangeState> s0(arena.ranges.size());
  for (auto& s : s0) s.step = 4;
  auto p = dev(p0), m = dev(m0), v = dev(v0);
  auto ranges = dev(arena.ranges);
  auto state = dev(s0);
  auto applied = dev(std::vector<int64_t>{4});
  auto outcome = dev(std::vector<kernels::cpu::AdamWOutcome>(1));
  const int64_t count = static_cast<int64_t>(arena.ranges.size());
  auto expect_untouched = [&](const char* why) {
    EXPECT_EQ(outcome.host()[0].applied, 0) << why;
    EXPECT_TRUE(BitwiseEqual(p.host(), p0)) << why;
    EXPECT_TRUE(BitwiseEqual(m.host(), m0)) << why;
    EXPECT_TRUE(BitwiseEqual(v.host(), v0)) << why;
    for (const auto& s : state.host()) EXPECT_EQ(s.step, 4) << why;
    EXPECT_EQ(applied.host()[0], 4) << why;
  };
  for (const float bad : {INFINITY, NAN}) {
    auto g = Random(static_cast<size_t>(arena.size), -0.3f, 0.3f, 373);
    g[arena.ranges[3].offset + 17] = bad;
    auto dg = dev(g);
    TARN_ON(target(), adamw_fused_step, p.get(), dg.get(), m.get(), v.get(), ranges.get(), state.get(), count,
            arena.blocks, FusedHyper(1.0f), nullptr, applied.get(), outcome.get());
    EXPECT_FALSE(std::isfinite(outcome.host()[0].norm));
    expect_untouched(bad > 0 ? "an infinite gradient" : "a NaN gradient");
  }
  // Not finite in a range without a gradient: not read, the step applies (checked last).
  auto g = Random(static_cast<size_t>(arena.size), -0.3f, 0.3f, 374);
  auto dg = dev(g);
  auto flag = dev(std::vector<int32_t>{1});
  TARN_ON(target(), adamw_fused_step, p.get(), dg.get(), m.get(), v.get(), ranges.get(), state.get(), count,
          arena.blocks, FusedHyper(1.0f), flag.get(), applied.get(), outcome.get());
  EXPECT_TRUE(std::isfinite(outcome.host()[0].norm)) << "the norm is still taken";
  expect_untouched("the skip flag");
  g[arena.ranges.back().offset] = NAN;
  auto dg_stale = dev(g);
  auto go = dev(std::vector<int32_t>{0});
  TARN_ON(target(), adamw_fused_step, p.get(), dg_stale.get(), m.get(), v.get(), ranges.get(), state.get(), count,
          arena.blocks, FusedHyper(1.0f), go.get(), applied.get(), outcome.get());
  EXPECT_EQ(outcome.host()[0].applied, 1) << "a stale value in a range without a gradient is not read";
  EXPECT_EQ(applied.host()[0], 5);
}

// A step's record: each micro-batch's loss x counted and NLL added in double, a loss that is
// not finite flags the step, the judge flags a mean over the bound; the CPU's arithmetic.
TEST_P(OptimConformance, StepRecordAddsAndJudgesAsTheCpu) {
  struct Case {
    std::vector<float> losses;
    double bound;
    int32_t bad;
  };
  const Case cases[] = {{{2.5f, 3.25f, 1e-3f}, 700.0, 0}, {{2.5f, NAN, 1.0f}, 700.0, 1}, {{2.5f, INFINITY}, 700.0, 1},
                        {{800.0f, 900.0f}, 700.0, 1}, {{2.0f, 3.0f}, 1.0, 1}};
  for (const Case& c : cases) {
    kernels::cpu::StepRecord want;
    auto rec = dev(std::vector<kernels::cpu::StepRecord>(1));
    int64_t total = 0;
    for (size_t i = 0; i < c.losses.size(); ++i) {
      const int64_t counted = 7 + static_cast<int64_t>(i);
      total += counted;
      kernels::cpu::CrossEntropyTotals t;
      t.nll = 0.37 * static_cast<double>(i + 1);
      auto loss = dev(std::vector<float>{c.losses[i]});
      auto totals = dev(std::vector<kernels::cpu::CrossEntropyTotals>{t});
      const bool with_totals = i % 2 == 0;  // the NLL from the totals, or passed in
      kernels::cpu::step_record_add(&want, &c.losses[i], counted, with_totals ? &t : nullptr, 1.5);
      TARN_ON(target(), step_record_add, rec.get(), loss.get(), counted, with_totals ? totals.get() : nullptr, 1.5);
    }
    kernels::cpu::step_record_judge(&want, total, c.bound);
    TARN_ON(target(), step_record_judge, rec.get(), total, c.bound);
    const kernels::cpu::StepRecord got = rec.host()[0];
    EXPECT_EQ(want.loss_bad, c.bad) << c.losses[0] << " " << c.losses[1];
    EXPECT_EQ(got.loss_bad, want.loss_bad) << c.losses[0] << " " << c.losses[1];
    if (!want.loss_bad) {
      EXPECT_EQ(got.loss_sum, want.loss_sum);
      EXPECT_EQ(got.nll_sum, want.nll_sum);
    }
  }
}

// The halves of the fused step that ZeRO-1 runs with the ranks' sums between them (issue 51):
// sum_squares_into leaves sum_squares's bits on the device, and adamw_fused_update over the
// ranges' own sums (0 without a gradient) is adamw_fused_step bit for bit; over parts split
// otherwise (two "ranks") its norm is sqrt((0 + a) + b), added in the order given.
TEST_P(OptimConformance, TheFusedStepsHalvesGiveItsBits) {
  for (const int64_t n : {int64_t{0}, int64_t{5}, kN, 3 * kernels::cpu::kSumSquaresBlock + 70}) {
    const auto x = Random(static_cast<size_t>(std::max<int64_t>(n, 1)), -2.0f, 2.0f, 380);
    auto dx = dev(x);
    auto out = dev(std::vector<double>{-1.0});
    TARN_ON(target(), sum_squares_into, dx.get(), n, out.get());
    const double want = TARN_ON(target(), sum_squares, dx.get(), n);
    const double got = out.host()[0];
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "n " << n << ": " << got << " vs " << want;
  }
  const FusedArena arena;
  const int64_t count = static_cast<int64_t>(arena.ranges.size());
  const auto p0 = Random(static_cast<size_t>(arena.size), -1.0f, 1.0f, 381);
  const std::vector<float> zeros(static_cast<size_t>(arena.size), 0.0f);
  auto fp = dev(p0), fm = dev(zeros), fv = dev(zeros);  // adamw_fused_step
  auto up = dev(p0), um = dev(zeros), uv = dev(zeros);  // sums, then adamw_fused_update
  auto ranges = dev(arena.ranges);
  const std::vector<kernels::cpu::AdamWRangeState> s0(arena.ranges.size());
  auto fstate = dev(s0), ustate = dev(s0);
  auto fapplied = dev(std::vector<int64_t>{0}), uapplied = dev(std::vector<int64_t>{0});
  const std::vector<kernels::cpu::AdamWOutcome> o0(1);
  auto foutcome = dev(o0), uoutcome = dev(o0);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g = Random(static_cast<size_t>(arena.size), -0.3f, 0.3f, 390 + static_cast<uint32_t>(step));
    auto dg = dev(g);
    const kernels::cpu::AdamWFusedHyper h = FusedHyper(0.5f);
    TARN_ON(target(), adamw_fused_step, fp.get(), dg.get(), fm.get(), fv.get(), ranges.get(), fstate.get(), count,
            arena.blocks, h, nullptr, fapplied.get(), foutcome.get());
    std::vector<double> sums;
    for (const auto& r : arena.ranges)
      sums.push_back(r.has_grad ? TARN_ON(target(), sum_squares, dg.get() + r.offset, r.numel) : 0.0);
    auto parts = dev(sums);
    TARN_ON(target(), adamw_fused_update, up.get(), dg.get(), um.get(), uv.get(), ranges.get(), ustate.get(), count,
            arena.blocks, h, parts.get(), count, nullptr, uapplied.get(), uoutcome.get());
    const kernels::cpu::AdamWOutcome a = foutcome.host()[0], b = uoutcome.host()[0];
    EXPECT_EQ(std::memcmp(&a.norm, &b.norm, sizeof a.norm), 0) << "step " << step;
    EXPECT_EQ(a.scale, b.scale) << "step " << step;
    EXPECT_EQ(a.applied, 1);
    EXPECT_EQ(b.applied, 1);
  }
  EXPECT_TRUE(BitwiseEqual(up.host(), fp.host()));
  EXPECT_TRUE(BitwiseEqual(um.host(), fm.host()));
  EXPECT_TRUE(BitwiseEqual(uv.host(), fv.host()));
  EXPECT_EQ(uapplied.host()[0], 3);
  // Two ranks' sums: the norm adds them in the order given, then the skip flag still skips.
  const std::vector<double> two = {0.1234567890123, 2.718281828459045};
  auto parts = dev(two);
  auto flag = dev(std::vector<int32_t>{1});
  auto dg = dev(Random(static_cast<size_t>(arena.size), -0.3f, 0.3f, 399));
  TARN_ON(target(), adamw_fused_update, up.get(), dg.get(), um.get(), uv.get(), ranges.get(), ustate.get(), count,
          arena.blocks, FusedHyper(0.5f), parts.get(), 2, flag.get(), uapplied.get(), uoutcome.get());
  const double want = std::sqrt((0.0 + two[0]) + two[1]);
  const kernels::cpu::AdamWOutcome got = uoutcome.host()[0];
  EXPECT_EQ(std::memcmp(&got.norm, &want, sizeof want), 0) << got.norm << " vs " << want;
  EXPECT_EQ(got.applied, 0);
  EXPECT_EQ(uapplied.host()[0], 3);
  EXPECT_TRUE(BitwiseEqual(um.host(), fm.host())) << "skipped: the moments are as they were";
}

// Several ranks' records (an all-gather of them): the sums added in rank order in double from 0,
// as Communicator::all_reduce_host adds them, and any rank's bad flag flags the step; `update`
// is left alone.
TEST_P(OptimConformance, StepRecordAgreeAddsTheRanksInOrder) {
  std::vector<kernels::cpu::StepRecord> ranks(3);
  const double losses[] = {1e16, 1.0, -1e16}, nlls[] = {0.1, 0.2, 0.3};
  for (size_t r = 0; r < ranks.size(); ++r) {
    ranks[r].loss_sum = losses[r];
    ranks[r].nll_sum = nlls[r];
  }
  for (const int32_t bad_rank : {-1, 2}) {
    if (bad_rank >= 0) ranks[static_cast<size_t>(bad_rank)].loss_bad = 1;
    kernels::cpu::StepRecord init;
    init.update.norm = 42.0;
    auto rec = dev(std::vector<kernels::cpu::StepRecord>{init});
    auto gathered = dev(ranks);
    TARN_ON(target(), step_record_agree, rec.get(), gathered.get(), 3);
    const kernels::cpu::StepRecord got = rec.host()[0];
    EXPECT_EQ(got.loss_sum, ((0.0 + 1e16) + 1.0) + -1e16) << "rank order, not a better sum (which gives 1)";
    EXPECT_EQ(got.nll_sum, ((0.0 + 0.1) + 0.2) + 0.3);
    EXPECT_EQ(got.loss_bad, bad_rank >= 0 ? 1 : 0);
    EXPECT_EQ(got.update.norm, 42.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, OptimConformance, ::testing::ValuesIn(kAllTargets), TargetName);

TEST(DevicePhilox, MatchesFrameworkPhiloxAt) {
  const uint64_t seeds[] = {0, 42, 0x123456789abcdefULL, ~0ULL};
  const uint64_t streams[] = {0, 1, 0xfedcba9876543210ULL};
  for (uint64_t seed : seeds)
    for (uint64_t stream : streams)
      for (uint64_t i : {0ULL, 1ULL, 2ULL, 3ULL, 4ULL, 1000ULL, (1ULL << 34) + 5, ~0ULL - 3})
        EXPECT_EQ(philox::at(seed, stream, i), philox_at(seed, stream, i)) << seed << " " << stream << " " << i;
}

// The reductions cut their sums by size only, so the emulator's thread order (and on hardware
// the scheduling) cannot change a bit of the result.
TEST(EmuDeterminism, ReductionsGiveTheSameBitsInEveryThreadOrder) {
  const int64_t rows = 300, cols = 129;
  const auto x = Random(rows * cols, -1.0f, 1.0f, 340);
  const auto dy = Random(rows * cols, -1.0f, 1.0f, 341);
  std::vector<float> mean(rows), rstd(rows), y(rows * cols);
  kernels::cpu::layer_norm_forward(x.data(), nullptr, nullptr, y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
  struct Result {
    double all, squares;
    std::vector<float> axis, dgamma;
  };
  auto run = [&](emu::ThreadOrder order) {
    emu::set_thread_order(order);
    Result r;
    r.all = kernels::cuda_emu::sum_all(x.data(), rows * cols);
    r.squares = kernels::cuda_emu::sum_squares(x.data(), rows * cols);
    r.axis.assign(cols, 0.0f);
    kernels::cuda_emu::sum_axis(x.data(), r.axis.data(), 1, rows, cols, 1.0f);
    r.dgamma.assign(cols, 0.0f);
    kernels::cuda_emu::layer_norm_backward(x.data(), dy.data(), nullptr, mean.data(), rstd.data(), nullptr,
                                           r.dgamma.data(), nullptr, rows, cols);
    return r;
  };
  const emu::ThreadOrder saved = emu::thread_order();
  const Result f = run(emu::ThreadOrder::forward);
  for (auto order : {emu::ThreadOrder::reverse, emu::ThreadOrder::random}) {
    const Result o = run(order);
    EXPECT_EQ(std::memcmp(&o.all, &f.all, sizeof(double)), 0) << emu::thread_order_name(order);
    EXPECT_EQ(std::memcmp(&o.squares, &f.squares, sizeof(double)), 0) << emu::thread_order_name(order);
    EXPECT_TRUE(BitwiseEqual(o.axis, f.axis)) << emu::thread_order_name(order);
    EXPECT_TRUE(BitwiseEqual(o.dgamma, f.dgamma)) << emu::thread_order_name(order);
  }
  emu::set_thread_order(saved);
}

}  // namespace
}  // namespace tarn::cuda_testing
