// Blocked softmax attention against the naive double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/softmax_attention.h"
#include "tests/attention/isa.h"
#include "tests/attention/reference.h"

namespace tarn::attention_test {
namespace {

namespace k = kernels::cpu;

constexpr double kTolerance = 1e-5;

struct Case {
  std::string name;
  int64_t batch, heads, n_q, n_k, d, e;
  bool causal, mask;
  int block_q, block_k;
  float magnitude;  // input scale: large values stress the online max
  int64_t window = 0;
};

struct Outputs {
  Floats out, lse, dq, dk, dv;
};

Outputs run_kernel(const Case& c, const Floats& q, const Floats& kk, const Floats& v,
                   const Floats& dout, const Floats& pad) {
  const k::SoftmaxAttentionDims dims{c.batch, c.heads, c.n_q, c.n_k, c.d, c.e};
  k::SoftmaxAttentionConfig cfg;
  cfg.causal = c.causal;
  cfg.key_padding_mask = c.mask ? pad.data() : nullptr;
  cfg.block_q = c.block_q;
  cfg.block_k = c.block_k;
  cfg.window = c.window;
  Outputs o;
  o.out.assign(c.batch * c.heads * c.n_q * c.e, NAN);
  o.lse.assign(c.batch * c.heads * c.n_q, NAN);
  o.dq.assign(q.size(), NAN);
  o.dk.assign(kk.size(), NAN);
  o.dv.assign(v.size(), NAN);
  Floats ws(k::softmax_attention_forward_workspace_floats(dims, cfg), NAN);
  k::softmax_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), o.out.data(),
                               o.lse.data(), ws.data(), ws.size());
  ws.assign(k::softmax_attention_backward_workspace_floats(dims, cfg), NAN);
  k::softmax_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), o.out.data(),
                                o.lse.data(), dout.data(), o.dq.data(), o.dk.data(), o.dv.data(),
                                ws.data(), ws.size());
  return o;
}

class SoftmaxAttentionMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(SoftmaxAttentionMatchesReference, OutputsAndAllGradientsWithin1e5) {
  const Case& c = GetParam();
  const Floats q = normal_floats(c.batch * c.heads * c.n_q * c.d, 1, c.magnitude);
  const Floats kk = normal_floats(c.batch * c.heads * c.n_k * c.d, 2, c.magnitude);
  const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 3);
  const Floats dout = normal_floats(c.batch * c.heads * c.n_q * c.e, 4);
  // Batch 0 pads its first key and a fifth of the rest; batch 1 pads every key.
  Floats pad = uniform_floats(c.batch * c.n_k, 5, 0.0f, 1.0f);
  for (auto& p : pad) p = p < 0.2f ? 1.0f : 0.0f;
  pad[0] = 1.0f;
  if (c.batch > 1) std::fill(pad.begin() + c.n_k, pad.begin() + 2 * c.n_k, 1.0f);

  const LinearShape s{c.batch, c.heads, c.n_q, c.n_k, c.d, c.e};
  const SoftmaxRef ref = softmax_reference(s, c.causal, c.mask ? pad.data() : nullptr,
                                           1.0 / std::sqrt(double(c.d)), q, kk, v, dout, c.window);
  for (bool avx512 : isa_settings()) {
    SCOPED_TRACE(avx512 ? "AVX-512 tiles" : "build ISA tiles");
    const Avx512Tiles isa(avx512);
    const Outputs o = run_kernel(c, q, kk, v, dout, pad);
    EXPECT_LE(relative_error(o.out, ref.out), kTolerance);
    EXPECT_LE(relative_error(o.dq, ref.dq), kTolerance);
    EXPECT_LE(relative_error(o.dk, ref.dk), kTolerance);
    EXPECT_LE(relative_error(o.dv, ref.dv), kTolerance);
    EXPECT_TRUE(all_finite(o.out) && all_finite(o.dq) && all_finite(o.dk) && all_finite(o.dv));
  }
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  for (int64_t n : {1, 63, 64, 65, 500})
    cs.push_back({"causal_n" + std::to_string(n), 1, 2, n, n, 64, 48, true, false, 64, 64, 1.0f});
  cs.push_back({"causal_n1000", 1, 1, 1000, 1000, 64, 48, true, false, 64, 64, 1.0f});
  cs.push_back({"bidirectional_n200", 2, 1, 200, 200, 32, 80, false, false, 64, 64, 1.0f});
  cs.push_back({"cross_nq70_nk200", 2, 2, 70, 200, 64, 27, false, false, 64, 64, 1.0f});
  cs.push_back({"cross_nq130_nk7", 1, 2, 130, 7, 128, 24, false, false, 64, 64, 1.0f});
  cs.push_back({"causal_mask", 3, 2, 150, 150, 32, 48, true, true, 64, 64, 1.0f});
  cs.push_back({"bidirectional_mask", 3, 1, 90, 90, 32, 48, false, true, 64, 64, 1.0f});
  cs.push_back({"uneven_blocks", 1, 2, 150, 150, 20, 36, true, false, 48, 80, 1.0f});
  cs.push_back({"small_blocks", 1, 1, 100, 100, 16, 16, true, true, 7, 13, 1.0f});
  cs.push_back({"large_scores", 1, 2, 120, 120, 32, 32, true, false, 64, 64, 4.0f});
  // Sliding windows: narrower than a block, spanning blocks, odd and wider than the sequence.
  cs.push_back({"window_causal_w16", 1, 2, 300, 300, 32, 24, true, false, 64, 64, 1.0f, 16});
  cs.push_back({"window_causal_w100_mask", 2, 2, 300, 300, 32, 24, true, true, 32, 48, 1.0f, 100});
  cs.push_back({"window_causal_w1", 1, 1, 70, 70, 16, 16, true, false, 16, 16, 1.0f, 1});
  cs.push_back({"window_bidirectional_w16", 1, 2, 300, 300, 32, 24, false, false, 64, 64, 1.0f, 16});
  cs.push_back({"window_bidirectional_w65_mask", 2, 1, 200, 200, 16, 40, false, true, 24, 40, 1.0f, 65});
  cs.push_back({"window_wider_than_sequence", 1, 2, 50, 50, 32, 32, false, true, 64, 64, 1.0f, 512});
  // Blocks 0: the kernel's own choice (32-row blocks for windows up to 128 keys, 64 beyond).
  cs.push_back({"window_causal_w64_default_blocks_mask", 2, 2, 300, 300, 32, 24, true, true, 0, 0, 1.0f, 64});
  cs.push_back({"window_bidirectional_w64_default_blocks", 1, 2, 300, 300, 32, 24, false, false, 0, 0, 1.0f, 64});
  cs.push_back({"window_bidirectional_w200_default_blocks", 1, 2, 300, 300, 32, 24, false, false, 0, 0, 1.0f, 200});
  cs.push_back({"window_causal_wider_than_sequence", 1, 2, 50, 50, 32, 32, true, false, 16, 16, 1.0f, 512});
  // Bidirectional windows across two sequences (hybrid cross-attention): more queries than keys
  // (the last queries see no key), fewer, and padded keys.
  cs.push_back({"window_cross_longer_queries", 1, 2, 300, 170, 32, 24, false, false, 64, 64, 1.0f, 16});
  cs.push_back({"window_cross_shorter_queries_mask", 2, 1, 90, 260, 16, 40, false, true, 24, 40, 1.0f, 65});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Kernels, SoftmaxAttentionMatchesReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SoftmaxAttention, QueriesThatSeeNoKeyGetZerosAndInfiniteLse) {
  const Case c{"none_visible", 1, 2, 30, 30, 16, 16, false, true, 16, 16, 1.0f};
  const Floats q = normal_floats(c.heads * c.n_q * c.d, 6), kk = normal_floats(q.size(), 7);
  const Floats v = normal_floats(c.heads * c.n_k * c.e, 8), dout = normal_floats(v.size(), 9);
  const Floats pad(c.n_k, 1.0f);
  const Outputs o = run_kernel(c, q, kk, v, dout, pad);
  for (float x : o.out) ASSERT_EQ(x, 0.0f);
  for (float x : o.lse) ASSERT_TRUE(std::isinf(x) && x > 0);
  for (const Floats* g : {&o.dq, &o.dk, &o.dv})
    for (float x : *g) ASSERT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace tarn::attention_test
