// The cuBLAS GEMMs (f32, and bf16 operands with f32 C) and the f32 <-> bf16 casts against the
// CPU's. Under the emulator the cuBLAS calls go to a column-major stand-in (kernels/emu/
// cublas_standin.h), so the row-major to column-major mapping of every transpose case, shared
// operands and the accumulate case is checked in every build; the GPU target checks it on cuBLAS.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cast.h"
#include "kernels/gemm.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

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

// |alpha| |op(A)| |op(B)| + |beta| |C0| per element of C, summed over the batch where every
// product accumulates into one C: what each side's rounding error is relative to.
std::vector<double> Magnitude(const Case& c, float alpha, const std::vector<float>& a, const std::vector<float>& b,
                              float beta, const std::vector<float>& c0) {
  const int64_t sa = c.share_a ? 0 : M * K, sb = K * N;
  std::vector<double> mag = Scaled(Abs(c0), std::fabs(beta));
  for (int64_t p = 0; p < batch; ++p) {
    const auto ab = AbsProduct(c.ta, c.tb, M, N, K, a.data() + p * sa, b.data() + p * sb);
    double* out = mag.data() + (c.accumulate ? 0 : p * M * N);
    for (int64_t i = 0; i < M * N; ++i) out[i] += std::fabs(alpha) * ab[i];
  }
  return mag;
}

// Roundings on the path of each term of C: K in the dot product (its product and up to K - 1
// additions, in whatever order), then alpha times the dot and the sum with beta C0 (beta C0
// itself takes 2); where the products accumulate into one C the calls run one after another
// (kernels/cuda/gemm.cu, and the CPU's), each adding its K + 2.
int64_t Roundings(const Case& c) { return (c.accumulate ? batch : 1) * (K + 2); }

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
    // Both sides within gamma_n(u) |alpha| |A| |B| + |beta| |C0| of the exact C (n = Roundings):
    // OpenBLAS and cuBLAS' f32 SIMT kernels round to nearest (u = 2^-24), in any order and
    // split-K; with TARN_ALLOW_TF32=1 cuBLAS runs on tensor cores (accumulation u = 2^-23)
    // and rounds each operand to tf32 first, 2 * 2^-11 per product.
    const bool tf32 = target() == Target::gpu && Tf32Allowed();
    const double rel = Gamma(Roundings(c), kF32) + Gamma(Roundings(c), tf32 ? kF32TensorCore : kF32) +
                       (tf32 ? Gamma(2, kTf32) : 0.0);
    EXPECT_TRUE(WithinBound(dc.host(), want, Scaled(Magnitude(c, 0.75f, a, b, 0.5f, c0), rel))) << "case " << index;
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
    // 0.5 C is exact: both sides give the same bits.
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
    // Products of bf16 values are exact in f32, so only the sums round: the CPU's at 2^-24,
    // cuBLAS' bf16 tensor cores at 2^-23 (f32 accumulation, not round to nearest), each within
    // gamma_n(u) |alpha| |A| |B| + |beta| |C0| of the exact C (n = Roundings).
    const double rel = Gamma(Roundings(c), kF32) + Gamma(Roundings(c), kF32TensorCore);
    EXPECT_TRUE(WithinBound(dc.host(), want, Scaled(Magnitude(c, 0.75f, a, b, 0.5f, c0), rel))) << "case " << index;
    ++index;
  }
}

TEST_P(GemmConformance, CastsRoundToNearestEvenAsTheCpuDoes) {
  std::vector<float> x = Random(5000, -1e3f, 1e3f, 630);
  // Ties (exactly half an ulp of bf16 above a value with an even or odd last bit), specials,
  // and NaNs of either sign, quiet and signalling, with payloads in the bits bf16 keeps and in
  // those it drops: every one must come out as the canonical 0x7FFF, the GPU's answer.
  const float specials[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f, 1e-40f, 3.4e38f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  const size_t first_nan = x.size();
  for (uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fa50000u, 0x7fffffffu}) {
    float nan;
    std::memcpy(&nan, &bits, 4);
    x.push_back(nan);
  }
  std::vector<bf16> want(x.size());
  kernels::cpu::cast_to_bf16(x.data(), want.data(), static_cast<int64_t>(x.size()));
  auto dx = dev(x);
  auto dy = dev(std::vector<bf16>(x.size(), kBf16Nan));
  TARN_ON(target(), cast_to_bf16, dx.get(), dy.get(), static_cast<int64_t>(x.size()));
  const std::vector<bf16> got = dy.host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, want[i].bits) << "x = " << x[i];
  for (size_t i = first_nan; i < x.size(); ++i) {
    ASSERT_EQ(want[i].bits, kBf16CanonicalNan) << "the CPU's cast of NaN number " << i - first_nan;
    ASSERT_EQ(bf16_from_float(x[i]).bits, kBf16CanonicalNan) << "bf16_from_float of NaN number " << i - first_nan;
  }
  auto back = dev(std::vector<float>(x.size(), 0.0f));
  TARN_ON(target(), cast_from_bf16, dy.get(), back.get(), static_cast<int64_t>(x.size()));
  const std::vector<float> widened = back.host();
  const std::vector<float> exact = ToFloat(want);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isnan(exact[i])) {
      ASSERT_EQ(widened[i], exact[i]) << "bf16 bits " << want[i].bits;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, GemmConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
