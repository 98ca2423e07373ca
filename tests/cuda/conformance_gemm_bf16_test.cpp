// The mixed-precision GEMM (bf16 operands, f32 compute and C: cublasGemmStridedBatchedEx) and
// the f32 <-> bf16 casts on the device, against the CPU. The operands are bf16 values, so the
// exact result is the f32 GEMM of their widened values: both devices must give it to f32
// accumulation error, in every transpose case, with a shared operand and the accumulate case.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

class GemmBf16Conformance : public Conformance {};

TEST_P(GemmBf16Conformance, StridedBatchedMatchesTheF32ProductOfTheBf16Values) {
  const int64_t batch = 3, M = 37, N = 33, K = 129;
  struct Case {
    bool ta, tb;
    bool share_a, accumulate;
  };
  const Case cases[] = {{false, false, false, false}, {true, false, false, false}, {false, true, false, false},
                        {true, true, false, false},   {false, true, true, false},  {true, false, false, true}};
  int index = 0;
  for (const Case& c : cases) {
    const int64_t sa = c.share_a ? 0 : M * K, sb = K * N, sc = c.accumulate ? 0 : M * N;
    const auto a = RoundedRandom((c.share_a ? 1 : batch) * M * K, -1.0f, 1.0f, 600 + index);
    const auto b = RoundedRandom(batch * K * N, -1.0f, 1.0f, 610 + index);
    const auto c0 = Random((c.accumulate ? 1 : batch) * M * N, -1.0f, 1.0f, 620 + index);
    std::vector<float> want = c0;
    kernels::cpu::gemm_batched(c.ta, c.tb, batch, M, N, K, 0.75f, a.data(), sa, b.data(), sb, 0.5f, want.data(), sc);
    auto da = dev(ToBf16(a)), db = dev(ToBf16(b));
    auto dc = dev(c0);
    TARN_ON(target(), gemm_batched_bf16, c.ta, c.tb, batch, M, N, K, 0.75f, da.get(), sa, db.get(), sb, 0.5f,
            dc.get(), sc);
    EXPECT_TRUE(AllClose(dc.host(), want, 1e-5f, 1e-5f)) << "case " << index;
    ++index;
  }
}

TEST_P(GemmBf16Conformance, CastsRoundToNearestEvenAsTheCpuDoes) {
  std::vector<float> x = Random(5000, -1e3f, 1e3f, 630);
  // Ties (exactly half an ulp of bf16 above a value with an even or odd last bit), specials.
  const float specials[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f, 1e-40f, 3.4e38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  std::vector<bf16> want(x.size());
  kernels::cpu::cast_to_bf16(x.data(), want.data(), static_cast<int64_t>(x.size()));
  auto dx = dev(x);
  auto dy = dev(std::vector<bf16>(x.size(), kBf16Nan));
  TARN_ON(target(), cast_to_bf16, dx.get(), dy.get(), static_cast<int64_t>(x.size()));
  const std::vector<bf16> got = dy.host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "x = " << x[i];
  auto back = dev(std::vector<float>(x.size(), 0.0f));
  TARN_ON(target(), cast_from_bf16, dy.get(), back.get(), static_cast<int64_t>(x.size()));
  const std::vector<float> widened = back.host();
  const std::vector<float> exact = ToFloat(want);
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(exact[i])) ASSERT_EQ(widened[i], exact[i]) << "bf16 bits " << want[i].bits;
}

INSTANTIATE_TEST_SUITE_P(Targets, GemmBf16Conformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
