// CUDA softmax attention (kernels/cuda/softmax_attention.cu, FlashAttention-2 style) against the
// CPU kernel of kernels/softmax_attention.h, f32: forward (out and lse) and every gradient, on
// lengths around the 64-row tiles (1, 63, 64, 65, 200), d = 32 and 64 and one d != e, causal and
// bidirectional, with key padding (including queries that see no key: out = 0, lse = +inf, zero
// gradients, no NaN), cross attention with Nq != Nk, under every emulated thread order and on a
// GPU when there is one. Each of the kernels' block barriers (after the tile loads, at the end
// of a tile step), and the __syncwarp() between writing dS (or P^T) and reading it back in the
// two backward kernels, makes these tests fail in all three orders when removed (each checked by
// removing it and rebuilding). The forward's __syncwarp() after writing P cannot be caught here:
// the row-sum shuffles that follow the writes already order the warp on the emulator.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_softmax_attention.h"
#include "kernels/softmax_attention.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/softmax_attention_bound.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

// Tolerance: per element, the worst case of tests/cuda/softmax_attention_bound.h for the kernel
// (f32 on CUDA cores: u = 2^-24 in any order, expf 2 ulps, logf 1) plus the CPU's (u = 2^-24,
// its exp within 2.5 * 2^-24, log 1 ulp): dot products of d terms for the scores and of e for dP and
// D, sums over up to Nk keys (Nq queries for dk, dv), a rounding per online rescale.
const std::vector<Rounding> kSides = {kCudaF32, kCpuF32};

struct Shape {
  int64_t batch, heads, n_q, n_k, d, e;
};

enum class Mask { none, some, all_of_batch1 };

std::string Describe(const Shape& s, bool causal, Mask mask, int64_t window) {
  std::ostringstream os;
  os << (causal ? "causal" : "bidirectional") << (window > 0 ? " window " + std::to_string(window) : "") << " B=" << s.batch << " H=" << s.heads << " Nq=" << s.n_q
     << " Nk=" << s.n_k << " d=" << s.d << " e=" << s.e
     << (mask == Mask::some ? " masked" : mask == Mask::all_of_batch1 ? " batch 1 fully masked" : "");
  return os.str();
}

// Every third key padded and, in batch 0, the first two keys too, so that under causal masking
// the first queries of batch 0 see no key at all; all_of_batch1 also pads every key of batch 1,
// so that none of its queries sees a key, causal or not.
std::vector<float> Padding(int64_t batch, int64_t n_k, Mask mask) {
  std::vector<float> pad(batch * n_k, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_k; ++j) {
      const bool padded = j % 3 == 1 || (b == 0 && j < 2) || (b == 1 && mask == Mask::all_of_batch1);
      pad[b * n_k + j] = padded ? 1.0f : 0.0f;
    }
  return pad;
}

bool NoNan(const std::vector<float>& x) {
  for (float v : x)
    if (std::isnan(v)) return false;
  return true;
}

class SoftmaxAttentionConformance : public Conformance {
 protected:
  // Runs forward and backward on the CPU and on the target and compares every output; the
  // target's backward starts from the CPU's out and lse, so each gradient is checked on its own.
  void Check(const Shape& s, bool causal, Mask mask, uint32_t seed, int64_t window = 0) {
    const std::string what = Describe(s, causal, mask, window);
    const int64_t bh = s.batch * s.heads;
    // Scores of a few units (|q . k| / sqrt(d) up to ~3): far from a uniform softmax.
    const auto q = Random(bh * s.n_q * s.d, -1.5f, 1.5f, seed);
    const auto k = Random(bh * s.n_k * s.d, -1.5f, 1.5f, seed + 1);
    const auto v = Random(bh * s.n_k * s.e, -1.0f, 1.0f, seed + 2);
    const auto dout = Random(bh * s.n_q * s.e, -1.0f, 1.0f, seed + 3);
    const auto pad = Padding(s.batch, s.n_k, mask);
    const cpu::SoftmaxAttentionDims dims{s.batch, s.heads, s.n_q, s.n_k, s.d, s.e};
    cpu::SoftmaxAttentionConfig cfg;
    cfg.causal = causal;
    cfg.window = window;
    cfg.key_padding_mask = mask != Mask::none ? pad.data() : nullptr;

    std::vector<float> want_out(bh * s.n_q * s.e), want_lse(bh * s.n_q);
    std::vector<float> want_dq(q.size()), want_dk(k.size()), want_dv(v.size());
    {
      std::vector<float> ws(cpu::softmax_attention_forward_workspace_floats(dims, cfg));
      cpu::softmax_attention_forward(dims, cfg, q.data(), k.data(), v.data(), want_out.data(), want_lse.data(),
                                     ws.data(), ws.size());
      ws.assign(cpu::softmax_attention_backward_workspace_floats(dims, cfg), 0.0f);
      cpu::softmax_attention_backward(dims, cfg, q.data(), k.data(), v.data(), want_out.data(), want_lse.data(),
                                      dout.data(), want_dq.data(), want_dk.data(), want_dv.data(), ws.data(),
                                      ws.size());
    }

    auto dq_in = dev(q), dk_in = dev(k), dv_in = dev(v), ddout = dev(dout), dpad = dev(pad);
    cpu::SoftmaxAttentionConfig dcfg = cfg;
    dcfg.key_padding_mask = mask != Mask::none ? dpad.get() : nullptr;
    auto got_out = out(want_out.size()), got_lse = out(want_lse.size());
    {
      const size_t n = TARN_ON(target(), softmax_attention_forward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), softmax_attention_forward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(), got_out.get(),
              got_lse.get(), ws.get(), n);
    }
    const SoftmaxAttentionBounds bound =
        SoftmaxAttentionErrorBounds(dims, causal, mask != Mask::none ? pad : std::vector<float>{}, q, k, v, dout,
                                    want_out, want_lse, kSides, window);
    EXPECT_TRUE(WithinBound(got_out.host(), want_out, bound.out)) << "out, " << what;
    EXPECT_TRUE(WithinBound(got_lse.host(), want_lse, bound.lse)) << "lse, " << what;

    auto out_in = dev(want_out), lse_in = dev(want_lse);
    auto got_dq = out(q.size()), got_dk = out(k.size()), got_dv = out(v.size());
    {
      const size_t n = TARN_ON(target(), softmax_attention_backward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), softmax_attention_backward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(), out_in.get(),
              lse_in.get(), ddout.get(), got_dq.get(), got_dk.get(), got_dv.get(), ws.get(), n);
    }
    const auto dq = got_dq.host(), dk = got_dk.host(), dv = got_dv.host();
    EXPECT_TRUE(NoNan(dq) && NoNan(dk) && NoNan(dv)) << "NaN gradient, " << what;
    EXPECT_TRUE(WithinBound(dq, want_dq, bound.dq)) << "dq, " << what;
    EXPECT_TRUE(WithinBound(dk, want_dk, bound.dk)) << "dk, " << what;
    EXPECT_TRUE(WithinBound(dv, want_dv, bound.dv)) << "dv, " << what;
  }
};

constexpr int64_t kHeadDims[] = {32, 64};
constexpr int64_t kLengths[] = {1, 63, 64, 65, 200};

TEST_P(SoftmaxAttentionConformance, CausalForwardAndBackwardMatchCpuAtTileBoundaries) {
  uint32_t seed = 1200;
  for (int64_t d : kHeadDims)
    for (int64_t n : kLengths)
      for (Mask mask : {Mask::none, Mask::some}) Check({2, 1, n, n, d, d}, true, mask, seed += 4);
}

TEST_P(SoftmaxAttentionConformance, BidirectionalForwardAndBackwardMatchCpuAtTileBoundaries) {
  uint32_t seed = 1300;
  for (int64_t d : kHeadDims)
    for (int64_t n : kLengths)
      for (Mask mask : {Mask::none, Mask::some}) Check({2, 1, n, n, d, d}, false, mask, seed += 4);
}

TEST_P(SoftmaxAttentionConformance, SlidingWindowForwardAndBackwardMatchCpu) {
  // Windows inside one tile, spanning tiles (the tiles a query tile reads start past 0, and the
  // dK/dV kernel's query tiles end before Nq), odd, and one wider than the sequence.
  uint32_t seed = 1700;
  for (bool causal : {true, false})
    for (int64_t window : {1, 16, 65, 100, 512})
      for (Mask mask : {Mask::none, Mask::some}) Check({2, 1, 200, 200, 32, 32}, causal, mask, seed += 4, window);
  Check({1, 2, 150, 150, 48, 24}, true, Mask::some, 1800, 40);
  // Across two sequences (hybrid cross-attention): more queries than keys, and fewer.
  Check({2, 1, 230, 120, 32, 32}, false, Mask::some, 1900, 16);
  Check({1, 2, 100, 210, 32, 32}, false, Mask::none, 1904, 65);
}

TEST_P(SoftmaxAttentionConformance, ValueDimDifferentFromHeadDimMatchesCpu) {
  // d = 48 with e = 24 (small output tiles), d = 16 with e = 128 (the widest), d = 128 with
  // e = 40, several heads.
  Check({1, 2, 130, 130, 48, 24}, true, Mask::some, 1400);
  Check({2, 2, 97, 97, 16, 128}, false, Mask::some, 1404);
  Check({1, 1, 70, 70, 128, 40}, true, Mask::none, 1408);
  // d and e not multiples of 4: rows loaded one float at a time, reductions over padded zeros.
  Check({1, 2, 66, 66, 17, 33}, true, Mask::some, 1412);
  Check({2, 1, 45, 71, 5, 3}, false, Mask::some, 1416);
}

TEST_P(SoftmaxAttentionConformance, CrossAttentionWithDifferentLengthsMatchesCpu) {
  uint32_t seed = 1500;
  const int64_t pairs[][2] = {{1, 64}, {63, 200}, {200, 65}, {65, 1}};
  for (const auto& nn : pairs)
    for (Mask mask : {Mask::none, Mask::some}) Check({2, 1, nn[0], nn[1], 64, 40}, false, mask, seed += 4);
}

TEST_P(SoftmaxAttentionConformance, QueriesThatSeeNoKeyGetZerosAndNoNan) {
  // Batch 1 pads every key: all its queries see nothing (out = 0, lse = +inf, zero gradients),
  // while batch 0 is ordinary; the CPU gives exactly that, and Check compares with it.
  Check({2, 2, 65, 65, 32, 32}, false, Mask::all_of_batch1, 1600);
  Check({2, 1, 65, 65, 32, 32}, true, Mask::all_of_batch1, 1604);
  Check({2, 1, 40, 70, 32, 48}, false, Mask::all_of_batch1, 1608);
}

TEST_P(SoftmaxAttentionConformance, BackwardIsDeterministic) {
  // No atomics: two runs give the same bits.
  const cpu::SoftmaxAttentionDims dims{1, 2, 150, 150, 32, 32};
  cpu::SoftmaxAttentionConfig cfg;
  cfg.causal = true;
  const int64_t n = 2 * 150 * 32;
  auto q = dev(Random(n, -1.5f, 1.5f, 1700)), k = dev(Random(n, -1.5f, 1.5f, 1701));
  auto v = dev(Random(n, -1.0f, 1.0f, 1702)), dout = dev(Random(n, -1.0f, 1.0f, 1703));
  auto o = out(n), lse = out(2 * 150);
  TARN_ON(target(), softmax_attention_forward, dims, cfg, q.get(), k.get(), v.get(), o.get(), lse.get(), nullptr, 0);
  std::vector<float> first[3];
  for (int run = 0; run < 2; ++run) {
    const size_t wn = TARN_ON(target(), softmax_attention_backward_workspace_floats, dims, cfg);
    auto ws = out(wn), dq = out(n), dk = out(n), dv = out(n);
    TARN_ON(target(), softmax_attention_backward, dims, cfg, q.get(), k.get(), v.get(), o.get(), lse.get(),
            dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), wn);
    const std::vector<float> got[3] = {dq.host(), dk.host(), dv.host()};
    for (int g = 0; g < 3; ++g) {
      if (run == 0)
        first[g] = got[g];
      else
        EXPECT_TRUE(BitwiseEqual(got[g], first[g])) << "gradient " << g;
    }
  }
}

TEST_P(SoftmaxAttentionConformance, BadArgumentsAreRejected) {
  cpu::SoftmaxAttentionConfig causal;
  causal.causal = true;
  // Causal needs Nq == Nk; the CUDA tiles hold d and e up to 128.
  EXPECT_THROW(TARN_ON(target(), softmax_attention_forward_workspace_floats, {1, 1, 4, 5, 8, 8}, causal),
               tarn::Error);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_forward_workspace_floats, {1, 1, 4, 4, 129, 8}, {}), tarn::Error);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_backward_workspace_floats, {1, 1, 4, 4, 8, 200}, {}), tarn::Error);
  // The backward's workspace is D, (B, H, Nq): linear in N, and too small a one is an error.
  const cpu::SoftmaxAttentionDims dims{2, 3, 100, 100, 32, 32};
  EXPECT_EQ(TARN_ON(target(), softmax_attention_backward_workspace_floats, dims, {}), size_t{2 * 3 * 100});
  std::vector<float> host(2 * 3 * 100 * 32, 0.5f);
  auto x = dev(host), o = dev(host), g = out(host.size()), lse = out(600), ws = out(10);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_backward, dims, {}, x.get(), x.get(), x.get(), o.get(), lse.get(),
                       o.get(), g.get(), nullptr, nullptr, ws.get(), 10),
               tarn::Error);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, SoftmaxAttentionConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
