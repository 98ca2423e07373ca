// CUDA linear attention (kernels/cuda/linear_attention.cu) against the CPU kernels of
// kernels/linear_attention.h, f32: the causal chunked scan and its two backward scans, the
// bidirectional and cross-attention passes and the recurrent step, on sequence lengths around
// the scan's chunk (1, 63, 64, 65, 200), d != e, with and without key padding, under every
// emulated thread order and on a GPU when there is one. The scan runs barrier-separated phases
// per chunk (load, masked chunk product, output, state update; for bidirectional passes load and
// state update, then load and output): with any one of its __syncthreads() removed, the causal
// tests (causal phases) or the bidirectional and cross tests (the others) fail in all three
// orders, and the step test fails in the forward and random orders without the step kernel's
// barrier (each checked by removing it and rebuilding).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

// Different summation order from the CPU's blocked GEMMs, over up to 200 rows of positive
// features: a few ulps of the largest partial sum.
constexpr float kLaRtol = 2e-4f;
constexpr float kLaAtol = 2e-5f;

struct Shape {
  int64_t batch, heads, n_q, n_k, d, e;
};

std::string Describe(const Shape& s, bool causal, bool mask) {
  std::ostringstream os;
  os << (causal ? "causal" : "bidirectional") << " B=" << s.batch << " H=" << s.heads << " Nq=" << s.n_q
     << " Nk=" << s.n_k << " d=" << s.d << " e=" << s.e << (mask ? " masked" : "");
  return os.str();
}

// Key padding with every third key padded and, in batch 0, the first keys too, so that with
// causal attention the first queries see no key at all (out = 0).
std::vector<float> Padding(int64_t batch, int64_t n_k) {
  std::vector<float> pad(batch * n_k, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_k; ++j) pad[b * n_k + j] = (j % 3 == 1 || (b == 0 && j < 2)) ? 1.0f : 0.0f;
  return pad;
}

class LinearAttentionConformance : public Conformance {
 protected:
  // Runs forward and backward on the CPU and on the target, compares every output.
  void Check(const Shape& s, bool causal, bool mask, uint32_t seed) {
    const std::string what = Describe(s, causal, mask);
    const int64_t bh = s.batch * s.heads;
    // Features of a positive feature map (elu + 1 lies in (0, inf)), values of either sign.
    const auto a = Random(bh * s.n_q * s.d, 0.05f, 1.0f, seed);
    const auto b = Random(bh * s.n_k * s.d, 0.05f, 1.0f, seed + 1);
    const auto v = Random(bh * s.n_k * s.e, -1.0f, 1.0f, seed + 2);
    const auto dout = Random(bh * s.n_q * s.e, -1.0f, 1.0f, seed + 3);
    const auto pad = Padding(s.batch, s.n_k);
    const cpu::LinearAttentionDims dims{s.batch, s.heads, s.n_q, s.n_k, s.d, s.e};
    cpu::LinearAttentionConfig cfg;
    cfg.causal = causal;
    cfg.key_padding_mask = mask ? pad.data() : nullptr;

    std::vector<float> want_out(bh * s.n_q * s.e), want_den(bh * s.n_q);
    std::vector<float> want_da(a.size()), want_db(b.size()), want_dv(v.size());
    {
      std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
      cpu::linear_attention_forward(dims, cfg, a.data(), b.data(), v.data(), want_out.data(), want_den.data(),
                                    ws.data(), ws.size());
      ws.assign(cpu::linear_attention_backward_workspace_floats(dims, cfg), 0.0f);
      cpu::linear_attention_backward(dims, cfg, a.data(), b.data(), v.data(), want_out.data(), want_den.data(),
                                     dout.data(), want_da.data(), want_db.data(), want_dv.data(), ws.data(),
                                     ws.size());
    }

    auto da_in = dev(a), db_in = dev(b), dv_in = dev(v), ddout = dev(dout), dpad = dev(pad);
    cpu::LinearAttentionConfig dcfg = cfg;
    dcfg.key_padding_mask = mask ? dpad.get() : nullptr;
    auto got_out = out(want_out.size()), got_den = out(want_den.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_forward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_forward, dims, dcfg, da_in.get(), db_in.get(), dv_in.get(), got_out.get(),
              got_den.get(), ws.get(), n);
    }
    EXPECT_TRUE(AllClose(got_out.host(), want_out, kLaRtol, kLaAtol)) << "out, " << what;
    EXPECT_TRUE(AllClose(got_den.host(), want_den, kLaRtol, kLaAtol)) << "den, " << what;

    // Backward from the CPU's out and den, so that each gradient is compared on its own.
    auto out_in = dev(want_out), den_in = dev(want_den);
    auto got_da = out(a.size()), got_db = out(b.size()), got_dv = out(v.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_backward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_backward, dims, dcfg, da_in.get(), db_in.get(), dv_in.get(), out_in.get(),
              den_in.get(), ddout.get(), got_da.get(), got_db.get(), got_dv.get(), ws.get(), n);
    }
    EXPECT_TRUE(AllClose(got_da.host(), want_da, kLaRtol, kLaAtol)) << "da, " << what;
    EXPECT_TRUE(AllClose(got_db.host(), want_db, kLaRtol, kLaAtol)) << "db, " << what;
    EXPECT_TRUE(AllClose(got_dv.host(), want_dv, kLaRtol, kLaAtol)) << "dv, " << what;
  }
};

// d = 32 with e = 48 (two output tiles plus the ones column) and d = 64 with e = 40.
constexpr int64_t kDims[][2] = {{32, 48}, {64, 40}};
constexpr int64_t kLengths[] = {1, 63, 64, 65, 200};

TEST_P(LinearAttentionConformance, CausalScanForwardAndBackwardMatchCpuAtChunkBoundaries) {
  uint32_t seed = 700;
  for (const auto& de : kDims)
    for (int64_t n : kLengths)
      for (bool mask : {false, true}) Check({2, 1, n, n, de[0], de[1]}, true, mask, seed += 4);
}

TEST_P(LinearAttentionConformance, CausalScanWithWideFeaturesAndValuesMatchesCpu) {
  // d and e at 128 (the state's p x 32 tile at its largest in use), several heads.
  Check({1, 2, 130, 130, 128, 96}, true, true, 800);
  Check({1, 1, 97, 97, 16, 128}, true, false, 804);
}

TEST_P(LinearAttentionConformance, BidirectionalSelfAttentionMatchesCpu) {
  uint32_t seed = 900;
  for (const auto& de : kDims)
    for (int64_t n : kLengths)
      for (bool mask : {false, true}) Check({2, 1, n, n, de[0], de[1]}, false, mask, seed += 4);
}

TEST_P(LinearAttentionConformance, CrossAttentionWithDifferentLengthsMatchesCpu) {
  uint32_t seed = 1000;
  const int64_t pairs[][2] = {{1, 64}, {63, 200}, {200, 65}, {65, 1}};
  for (const auto& nn : pairs)
    for (bool mask : {false, true}) Check({2, 1, nn[0], nn[1], 64, 40}, false, mask, seed += 4);
}

TEST_P(LinearAttentionConformance, RecurrentStepMatchesCpuStepByStep) {
  const int64_t batch = 2, heads = 2, d = 32, e = 48, steps = 5;
  const cpu::LinearAttentionDims dims{batch, heads, 1, 1, d, e};
  std::vector<float> want_state(batch * heads * cpu::linear_attention_state_floats(d, e), 0.0f);
  auto state = dev(want_state);
  for (int64_t t = 0; t < steps; ++t) {
    const auto a = Random(batch * heads * d, 0.05f, 1.0f, 1100 + 3 * t);
    const auto b = Random(batch * heads * d, 0.05f, 1.0f, 1101 + 3 * t);
    const auto v = Random(batch * heads * e, -1.0f, 1.0f, 1102 + 3 * t);
    // Batch 1 pads its first two tokens: its outputs stay zero until its first real key.
    const std::vector<float> pad = {0.0f, t < 2 ? 1.0f : 0.0f};
    cpu::LinearAttentionConfig cfg;
    cfg.key_padding_mask = pad.data();
    std::vector<float> want_out(batch * heads * e);
    cpu::linear_attention_step(dims, cfg, a.data(), b.data(), v.data(), want_state.data(), want_out.data());
    auto da = dev(a), db = dev(b), dv = dev(v), dpad = dev(pad);
    cfg.key_padding_mask = dpad.get();
    auto got = out(want_out.size());
    TARN_ON(target(), linear_attention_step, dims, cfg, da.get(), db.get(), dv.get(), state.get(), got.get());
    EXPECT_TRUE(AllClose(got.host(), want_out, kLaRtol, kLaAtol)) << "step " << t;
    EXPECT_TRUE(AllClose(state.host(), want_state, kLaRtol, kLaAtol)) << "state after step " << t;
  }
}

TEST_P(LinearAttentionConformance, FeatureMapsOtherThanIdentityAreRejected) {
  const cpu::LinearAttentionDims dims{1, 1, 4, 4, 8, 8};
  cpu::LinearAttentionConfig cfg;
  cfg.feature_map = cpu::FeatureMap::elu1;
  EXPECT_THROW(TARN_ON(target(), linear_attention_forward_workspace_floats, dims, cfg), tarn::Error);
}

TEST_P(LinearAttentionConformance, WorkspaceGrowsLinearlyInSequenceLength) {
  // The backward recomputes its states (DESIGN.md section 2): its scratch is G, (B, H, N, e + 1),
  // whatever d and the chunk size, so doubling N doubles it.
  for (bool causal : {true, false}) {
    cpu::LinearAttentionConfig cfg;
    cfg.causal = causal;
    for (int64_t n : {int64_t{64}, int64_t{1000}, int64_t{100000}}) {
      const cpu::LinearAttentionDims dims{2, 3, n, n, 64, 40};
      const cpu::LinearAttentionDims twice{2, 3, 2 * n, 2 * n, 64, 40};
      const size_t fwd = TARN_ON(target(), linear_attention_forward_workspace_floats, dims, cfg);
      const size_t bwd = TARN_ON(target(), linear_attention_backward_workspace_floats, dims, cfg);
      EXPECT_EQ(bwd, static_cast<size_t>(2 * 3 * n * 41));
      EXPECT_EQ(TARN_ON(target(), linear_attention_forward_workspace_floats, twice, cfg), 2 * fwd);
      EXPECT_EQ(TARN_ON(target(), linear_attention_backward_workspace_floats, twice, cfg), 2 * bwd);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, LinearAttentionConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
