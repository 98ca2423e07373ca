// The cuBLAS GEMMs (f32, and bf16 operands with f32 C) and the f32 <-> bf16 casts against the
// CPU's. Under the emulator the cuBLAS calls go to a column-major stand-in (kernels/emu/
// cublas_standin.h), so the row-major to column-major mapping of every transpose case, shared
// operands and the accumulate case is checked in every build; the GPU target checks it on cuBLAS.
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

class GemmConformance : public Conformance {};

// Every transpose, a shared left operand, and every product accumulated into one C.
constexpr int64_t batch = 3, M = 37, N = 33, K = 129;
struct Case {
  bool ta, tb;
  bool share_a, accumulate;
};
constexpr Case kCases[] = {{false, false, false, false}, {true, false, false, false}, {false, true, false, false},
                           {true, true, false, false},   {false, true, true, false},  {true, false, false, true}};

TEST_P(GemmConformance, StridedBatchedMatchesCpuForEveryTransposeAndStride) {
  int index = 0;
  for (const Case& c : kCases) {
    const int64_t sa = c.share_a ? 0 : M * K, sb = K * N, sc = c.accumulate ? 0 : M * N;
    const auto a = Random((c.share_a ? 1 : batch) * M * K, -1.0f, 1.0f, 500 + index);
    const auto b = Random(batch * K * N, -1.0f, 1.0f, 510 + index);
    const auto c0 = Random((c.accumulate ? 1 : batch) * M * N, -1.0f, 1.0f, 520 + index);
    std::vector<float> want = c0;
    kernels::cpu::gemm_batched(c.ta, c.tb, batch, M, N, K, 0.75f, a.data(), sa, b.data(), sb, 0.5f, want.data(), sc);
    auto da = dev(a), db = dev(b), dc = dev(c0);
    TARN_ON(target(), gemm_batched, c.ta, c.tb, batch, M, N, K, 0.75f, da.get(), sa, db.get(), sb, 0.5f, dc.get(), sc);
    EXPECT_TRUE(AllClose(dc.host(), want, 1e-5f, 1e-5f)) << "case " << index;
    ++index;
  }
  // K = 0: nothing to multiply, C = beta C (cuBLAS still refuses a leading dimension of 0).
  for (bool ta : {false, true}) {
    const auto c0 = Random(batch * M * N, -1.0f, 1.0f, 530);
    std::vector<float> want = c0;
    for (float& x : want) x *= 0.5f;
    const std::vector<float> none(1, 0.0f);
    auto da = dev(none), db = dev(none), dc = dev(c0);
    TARN_ON(target(), gemm_batched, ta, false, batch, M, N, 0, 0.75f, da.get(), 0, db.get(), 0, 0.5f, dc.get(), M * N);
    EXPECT_TRUE(AllClose(dc.host(), want, 0.0f, 0.0f)) << "K = 0, transposed a " << ta;
  }
}

// The mixed-precision GEMM (bf16 operands, f32 compute and C: cublasGemmStridedBatchedEx). Its
// operands are bf16 values, so the exact result is the f32 GEMM of their widened values.
TEST_P(GemmConformance, StridedBatchedMatchesTheF32ProductOfTheBf16Values) {
  int index = 0;
  for (const Case& c : kCases) {
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

TEST_P(GemmConformance, CastsRoundToNearestEvenAsTheCpuDoes) {
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

INSTANTIATE_TEST_SUITE_P(Targets, GemmConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
