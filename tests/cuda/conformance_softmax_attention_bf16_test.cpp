// bf16 softmax attention (kernels/cuda/softmax_attention_bf16.cu, tensor cores) against the CPU
// f32 kernel of kernels/softmax_attention.h run on the same bf16-rounded inputs: forward (out
// and lse) and every gradient, on lengths around the 64-row tiles (1, 63, 64, 65, 150), d = 32,
// 64 and 128 (and 72, 100, 120: widths the kernels pad to 128), d != e (down to 5 and 3: the
// scalar row loads, zero-padded tiles), causal and
// bidirectional, key padding (with queries that see no key: out = 0, lse = +inf, zero
// gradients), cross attention with Nq != Nk, under every emulated thread order (the GPU target
// runs only where there is a device).
//
// Tolerance. The reference sees exactly the kernel's inputs (q, k, v, dout, and for backward the
// forward's out rounded to bf16 and its lse), so what differs is the kernel's own rounding: P
// and dS are rounded to bf16 (u = 2^-8: 7 explicit mantissa bits, round to nearest) for the
// tensor cores, out and the gradients are stored as bf16 (2^-8), and the tile products
// accumulate in f32 on tensor cores (u = 2^-23, not round to nearest). Each element must lie
// within the worst case of tests/cuda/softmax_attention_bound.h for those roundings plus the
// CPU's (f32, u = 2^-24): out, a weighted mean of v, moves by 2^-8 of sum_j p_ij |v_j| from the
// rounded weights and 2^-8 |out| from the store; the gradients, sums of terms of both signs
// (dq_i, for one, cancels to 0 for a query with one key, where only the f32 sums' error is left),
// by 2^-8 of their terms' magnitudes. (This replaces bounds of 2^-7 |want| + 2^-8 max |want|,
// 2^-6 |want| + 2^-7 max |want| and 2^-8 for lse derived from a 2^-9 rounding, half of bf16's,
// with a 1e-6 floor for the cancelling gradients that the f32 sums' worst case on tensor cores
// exceeds.) A wrong tile, mask or scale is off by the output's own size. Removing any one of
// the kernels' 14 barriers (__syncthreads and __syncwarp), a causal mask off by one, or dQ's
// scale made tests here fail (each checked by breaking it and rebuilding, under the earlier
// bounds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_softmax_attention_bf16.h"
#include "kernels/emu/bf16.h"
#include "kernels/softmax_attention.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/softmax_attention_bound.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

struct Dims {
  int64_t batch, heads, n_q, n_k, d, e;
};

enum class Keys { all, some_padded, batch1_all_padded };

// Every third key padded and, in batch 0, the first two, so that the first causal queries of
// batch 0 see no key; batch1_all_padded also pads every key of batch 1.
std::vector<float> KeyPadding(int64_t batch, int64_t n_k, Keys keys) {
  std::vector<float> pad(batch * n_k, 0.0f);
  if (keys == Keys::all) return pad;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_k; ++j)
      pad[b * n_k + j] = j % 3 == 1 || (b == 0 && j < 2) || (b == 1 && keys == Keys::batch1_all_padded) ? 1.0f : 0.0f;
  return pad;
}

// The kernel (tensor cores, bf16 operands and outputs, expf, logf) and the CPU reference.
const std::vector<Rounding> kSides = {kCudaBf16, kCpuF32};

class SoftmaxAttentionBf16Conformance : public Conformance {
 protected:
  void Check(const Dims& s, bool causal, Keys keys, uint32_t seed, int64_t window = 0) {
    std::ostringstream what_os;
    what_os << (causal ? "causal" : "bidirectional") << (window > 0 ? " window " + std::to_string(window) : "")
            << " B=" << s.batch << " H=" << s.heads << " Nq=" << s.n_q
            << " Nk=" << s.n_k << " d=" << s.d << " e=" << s.e << (keys != Keys::all ? " padded" : "");
    const std::string what = what_os.str();
    const int64_t bh = s.batch * s.heads;
    // Scores of a few units (|q . k| / sqrt(d) up to ~3): far from a uniform softmax.
    const auto q = RoundedRandom(bh * s.n_q * s.d, -1.5f, 1.5f, seed);
    const auto k = RoundedRandom(bh * s.n_k * s.d, -1.5f, 1.5f, seed + 1);
    const auto v = RoundedRandom(bh * s.n_k * s.e, -1.0f, 1.0f, seed + 2);
    const auto dout = RoundedRandom(bh * s.n_q * s.e, -1.0f, 1.0f, seed + 3);
    const auto pad = KeyPadding(s.batch, s.n_k, keys);
    const cpu::SoftmaxAttentionDims dims{s.batch, s.heads, s.n_q, s.n_k, s.d, s.e};
    cpu::SoftmaxAttentionConfig cfg;
    cfg.causal = causal;
    cfg.window = window;
    cfg.key_padding_mask = keys != Keys::all ? pad.data() : nullptr;

    // The reference: forward, then backward from out rounded to bf16 (what the kernel hands on).
    std::vector<float> want_out(bh * s.n_q * s.e), want_lse(bh * s.n_q);
    std::vector<float> want_dq(q.size()), want_dk(k.size()), want_dv(v.size());
    std::vector<float> ws(cpu::softmax_attention_forward_workspace_floats(dims, cfg));
    cpu::softmax_attention_forward(dims, cfg, q.data(), k.data(), v.data(), want_out.data(), want_lse.data(), ws.data(),
                                   ws.size());
    const std::vector<float> out16 = Rounded(want_out);
    ws.assign(cpu::softmax_attention_backward_workspace_floats(dims, cfg), 0.0f);
    cpu::softmax_attention_backward(dims, cfg, q.data(), k.data(), v.data(), out16.data(), want_lse.data(),
                                    dout.data(), want_dq.data(), want_dk.data(), want_dv.data(), ws.data(), ws.size());

    auto dq_in = dev(ToBf16(q)), dk_in = dev(ToBf16(k)), dv_in = dev(ToBf16(v)), ddout = dev(ToBf16(dout));
    auto dpad = dev(pad);
    cpu::SoftmaxAttentionConfig dcfg = cfg;
    dcfg.key_padding_mask = keys != Keys::all ? dpad.get() : nullptr;
    DeviceArray<bf16> got_out(target(), want_out.size(), kBf16Nan);
    auto got_lse = out(want_lse.size());
    EXPECT_EQ(TARN_ON(target(), softmax_attention_bf16_forward_workspace_floats, dims, dcfg), size_t{0});
    TARN_ON(target(), softmax_attention_bf16_forward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(),
            got_out.get(), got_lse.get(), nullptr, 0);
    const SoftmaxAttentionBounds bound = SoftmaxAttentionErrorBounds(
        dims, causal, keys != Keys::all ? pad : std::vector<float>{}, q, k, v, dout, out16, want_lse, kSides, window);
    EXPECT_TRUE(WithinBound(ToFloat(got_out.host()), want_out, bound.out)) << "out, " << what;
    EXPECT_TRUE(WithinBound(got_lse.host(), want_lse, bound.lse)) << "lse, " << what;

    auto out_in = dev(ToBf16(out16));
    auto lse_in = dev(want_lse);
    DeviceArray<bf16> got_dq(target(), q.size(), kBf16Nan), got_dk(target(), k.size(), kBf16Nan),
        got_dv(target(), v.size(), kBf16Nan);
    const size_t n = TARN_ON(target(), softmax_attention_bf16_backward_workspace_floats, dims, dcfg);
    EXPECT_EQ(n, static_cast<size_t>(bh * s.n_q));
    auto work = out(n);
    TARN_ON(target(), softmax_attention_bf16_backward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(), out_in.get(),
            lse_in.get(), ddout.get(), got_dq.get(), got_dk.get(), got_dv.get(), work.get(), n);
    EXPECT_TRUE(WithinBound(ToFloat(got_dq.host()), want_dq, bound.dq)) << "dq, " << what;
    EXPECT_TRUE(WithinBound(ToFloat(got_dk.host()), want_dk, bound.dk)) << "dk, " << what;
    EXPECT_TRUE(WithinBound(ToFloat(got_dv.host()), want_dv, bound.dv)) << "dv, " << what;
  }
};

constexpr int64_t kLengths[] = {1, 63, 64, 65, 150};

TEST_P(SoftmaxAttentionBf16Conformance, CausalForwardAndBackwardMatchCpuAtTileBoundaries) {
  uint32_t seed = 2200;
  for (int64_t d : {32, 64})
    for (int64_t n : kLengths)
      for (Keys keys : {Keys::all, Keys::some_padded}) Check({2, 1, n, n, d, d}, true, keys, seed += 4);
}

TEST_P(SoftmaxAttentionBf16Conformance, BidirectionalForwardAndBackwardMatchCpuAtTileBoundaries) {
  uint32_t seed = 2300;
  for (int64_t n : kLengths)
    for (Keys keys : {Keys::all, Keys::some_padded}) Check({2, 1, n, n, 32, 32}, false, keys, seed += 4);
}

TEST_P(SoftmaxAttentionBf16Conformance, SlidingWindowForwardAndBackwardMatchCpu) {
  // Windows inside one 16-row tile, spanning 64-row tiles, odd, and wider than the sequence.
  uint32_t seed = 2700;
  for (bool causal : {true, false})
    for (int64_t window : {1, 16, 65, 512})
      for (Keys keys : {Keys::all, Keys::some_padded}) Check({2, 1, 150, 150, 32, 32}, causal, keys, seed += 4, window);
  // Across two sequences (hybrid cross-attention): more queries than keys, and fewer.
  Check({2, 1, 180, 100, 32, 32}, false, Keys::some_padded, 2900, 16);
  Check({1, 2, 90, 170, 32, 32}, false, Keys::all, 2904, 65);
}

TEST_P(SoftmaxAttentionBf16Conformance, ValueDimDifferentFromHeadDimMatchesCpu) {
  Check({1, 2, 130, 130, 48, 24}, true, Keys::some_padded, 2400);
  Check({1, 1, 97, 97, 16, 128}, false, Keys::some_padded, 2404);
  Check({1, 1, 70, 70, 128, 40}, true, Keys::all, 2408);
  // Widths that are not multiples of 8: rows copied one value at a time, tiles zero-padded.
  Check({1, 2, 66, 66, 17, 33}, true, Keys::some_padded, 2412);
  Check({2, 1, 45, 71, 5, 3}, false, Keys::some_padded, 2416);
}

TEST_P(SoftmaxAttentionBf16Conformance, WideHeadsForwardAndBackwardMatchCpu) {
  // The kernels' widest fragments (kDim = 128: the dK, dV kernel takes each query tile in four
  // passes of 16 queries), at d = e = 128 and at widths padded up to it: 72 (16-byte rows, tiles
  // zero-padded to 80) and 120; causal, bidirectional, windowed, with and without padded keys.
  uint32_t seed = 3000;
  for (int64_t d : {128, 72, 120}) {
    Check({2, 1, 150, 150, d, d}, true, Keys::all, seed += 4);
    Check({2, 1, 150, 150, d, d}, true, Keys::some_padded, seed += 4);
    Check({2, 1, 150, 150, d, d}, false, Keys::all, seed += 4);
    Check({2, 1, 150, 150, d, d}, false, Keys::some_padded, seed += 4);
    Check({2, 1, 150, 150, d, d}, true, Keys::some_padded, seed += 4, 65);
    Check({2, 1, 150, 150, d, d}, false, Keys::all, seed += 4, 16);
  }
  // Unequal wide widths, one not a multiple of 8 (scalar row loads), queries that see no key.
  Check({1, 2, 97, 97, 100, 128}, true, Keys::some_padded, 3100);
  Check({2, 1, 65, 65, 128, 72}, false, Keys::batch1_all_padded, 3104);
  Check({2, 1, 63, 130, 120, 128}, false, Keys::some_padded, 3108, 16);
}

TEST_P(SoftmaxAttentionBf16Conformance, CrossAttentionWithDifferentLengthsMatchesCpu) {
  uint32_t seed = 2500;
  const int64_t pairs[][2] = {{1, 64}, {63, 150}, {150, 65}, {65, 1}};
  for (const auto& nn : pairs) Check({2, 1, nn[0], nn[1], 64, 40}, false, Keys::some_padded, seed += 4);
}

TEST_P(SoftmaxAttentionBf16Conformance, QueriesThatSeeNoKeyGetZerosAndNoNan) {
  Check({2, 2, 65, 65, 32, 32}, false, Keys::batch1_all_padded, 2600);
  Check({2, 1, 65, 65, 32, 32}, true, Keys::batch1_all_padded, 2604);
}

TEST_P(SoftmaxAttentionBf16Conformance, BackwardIsDeterministic) {
  const cpu::SoftmaxAttentionDims dims{1, 2, 150, 150, 32, 32};
  cpu::SoftmaxAttentionConfig cfg;
  cfg.causal = true;
  const int64_t n = 2 * 150 * 32;
  auto q = dev(ToBf16(Random(n, -1.5f, 1.5f, 2700))), k = dev(ToBf16(Random(n, -1.5f, 1.5f, 2701)));
  auto v = dev(ToBf16(Random(n, -1.0f, 1.0f, 2702))), dout = dev(ToBf16(Random(n, -1.0f, 1.0f, 2703)));
  DeviceArray<bf16> o(target(), n, kBf16Nan);
  auto lse = out(2 * 150);
  TARN_ON(target(), softmax_attention_bf16_forward, dims, cfg, q.get(), k.get(), v.get(), o.get(), lse.get(), nullptr,
          0);
  std::vector<bf16> first[3];
  for (int run = 0; run < 2; ++run) {
    const size_t wn = TARN_ON(target(), softmax_attention_bf16_backward_workspace_floats, dims, cfg);
    auto ws = out(wn);
    DeviceArray<bf16> dq(target(), n, kBf16Nan), dk(target(), n, kBf16Nan), dv(target(), n, kBf16Nan);
    TARN_ON(target(), softmax_attention_bf16_backward, dims, cfg, q.get(), k.get(), v.get(), o.get(), lse.get(),
            dout.get(), dq.get(), dk.get(), dv.get(), ws.get(), wn);
    const std::vector<bf16> got[3] = {dq.host(), dk.host(), dv.host()};
    for (int g = 0; g < 3; ++g) {
      if (run == 0)
        first[g] = got[g];
      else
        EXPECT_TRUE(BitwiseEqual(ToFloat(got[g]), ToFloat(first[g]))) << "gradient " << g;
    }
  }
}

TEST_P(SoftmaxAttentionBf16Conformance, BadArgumentsAreRejected) {
  cpu::SoftmaxAttentionConfig causal;
  causal.causal = true;
  EXPECT_THROW(TARN_ON(target(), softmax_attention_bf16_forward_workspace_floats, {1, 1, 4, 5, 8, 8}, causal),
               tarn::Error);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_bf16_forward_workspace_floats, {1, 1, 4, 4, 129, 8}, {}),
               tarn::Error);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_bf16_backward_workspace_floats, {1, 1, 4, 4, 8, 200}, {}),
               tarn::Error);
  const cpu::SoftmaxAttentionDims dims{1, 1, 8, 8, 8, 8};
  std::vector<bf16> host(64, bf16_from_float(0.5f));
  auto x = dev(host), g = dev(host);
  auto lse = out(8), ws = out(4);
  EXPECT_THROW(TARN_ON(target(), softmax_attention_bf16_backward, dims, {}, x.get(), x.get(), x.get(), x.get(),
                       lse.get(), x.get(), g.get(), nullptr, nullptr, ws.get(), 4),
               tarn::Error);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, SoftmaxAttentionBf16Conformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
