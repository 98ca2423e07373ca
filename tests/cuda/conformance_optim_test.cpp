// CUDA optimizer kernels against the CPU kernels, the device Philox against framework/rng.h,
// and the promise that every reduction gives the same bits in every thread order.
#include <gtest/gtest.h>

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
