// The cuBLAS GEMM interface against the CPU's. Under the emulator gemm_batched forwards to the
// CPU kernel, so these runs check only the plumbing; the GPU run checks the row-major to
// column-major mapping of every transpose case, shared operands and the accumulate case.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/gemm.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

class GemmConformance : public Conformance {};

TEST_P(GemmConformance, StridedBatchedMatchesCpuForEveryTransposeAndStride) {
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

INSTANTIATE_TEST_SUITE_P(Targets, GemmConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
