// bf16 linear attention (kernels/cuda/linear_attention_bf16.cu) against the CPU f32 kernels of
// kernels/linear_attention.h run on the same bf16-rounded inputs: the causal scan and its two
// backward scans, bidirectional and cross attention, on sequence lengths around the 64-row chunk
// (1, 63, 64, 65, 500), d in {32, 64, 128} with d != e, key padding (with queries that see no
// key at all), every fused feature map, under every emulated thread order (the GPU target runs
// only where there is a device).
//
// Tolerance. The reference sees exactly the kernel's inputs (q, k, v, dout and, for backward,
// out, all rounded to bf16), so what differs is the kernel's own rounding: phi(q), phi(k), G and
// the masked chunk product and the state are rounded to bf16 (2^-8 relative each: 7 explicit
// mantissa bits, round to nearest) for the tensor cores, and the outputs are stored as bf16
// (2^-8). How far such
// roundings move an output depends on the output: den and out are sums of positive weights and
// move by ~2^-9 of their size, while the gradients are differences of nearly equal terms
// (dq_i, for instance, is exactly 0 for a query with a single key) and move by 2^-9 of the
// terms, which can be far more than the result. So the test measures it: the CPU op is rerun on
// inputs (and out) jittered by a relative 2^-8 (4 draws, the farthest kept; q and k stay put
// under the exp map, see RunCpu), and each element must lie within
//   1e-2 |want| + 1e-2 rms(want) + 3 max |jittered - want|
// (rms and max over the whole tensor). On every case here the largest error stays below 0.7 of
// the last two terms alone (the worst: d = e = 1, where dq is exactly 0 and dv nearly cancels);
// a wrong tile, mask, chunk order or a missing barrier is off by the output's own size (each
// checked by breaking it on purpose: every barrier of the scan kernel, the __syncwarp before
// the state is rounded, the diagonal mask, the padded rows of dk, the exp map's term at its
// row's argmax). On a GPU the bf16 roundings are the same (round to nearest even); its f32
// sums on tensor cores (u = 2^-23, truncating, in another order) add at most
// gamma_{N+d+e}(2^-23) < 1e-4 of the terms' magnitudes (N + d + e <= 692 here) where one
// jitter moves them by 2^-8 = 3.9e-3: inside the three noise floors' slack, so the bound holds.
//
// The sequence split across blocks (pass 1 segment sums, pass 2 prefix / suffix / total, pass 3
// the scans from them) runs automatically wherever B * H is small (most cases here: the
// emulator reports 132 SMs, as an H100) and is forced to 2, 3, 4 (an empty last segment) and
// one segment per chunk by SequenceSplitAcrossBlocksMatchesCpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_linear_attention_bf16.h"
#include "kernels/emu/bf16.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;
using cpu::FeatureMap;


struct Shape {
  int64_t batch, heads, n_q, n_k, d, e;
};

std::string Describe(const Shape& s, bool causal, bool mask, FeatureMap fm) {
  std::ostringstream os;
  os << (causal ? "causal" : "bidirectional") << " B=" << s.batch << " H=" << s.heads << " Nq=" << s.n_q
     << " Nk=" << s.n_k << " d=" << s.d << " e=" << s.e << (mask ? " masked" : "") << " phi="
     << cpu::feature_map_name(fm);
  return os.str();
}

// Every third key padded and, in batch 0, the first two, so that the first causal queries of
// batch 0 see no key (out = 0, den = 0); with all_keys_of_last_batch the last batch's keys are
// all padded, so that every one of its queries sees none.
std::vector<float> Padding(int64_t batch, int64_t n_k, bool all_keys_of_last_batch = false) {
  std::vector<float> pad(batch * n_k, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_k; ++j) {
      const bool padded = j % 3 == 1 || (b == 0 && j < 2) || (all_keys_of_last_batch && b == batch - 1);
      pad[b * n_k + j] = padded ? 1.0f : 0.0f;
    }
  return pad;
}

// The CPU op's results on one set of inputs.
struct Results {
  std::vector<float> out, den, dq, dk, dv;
};

struct Inputs {
  std::vector<float> q, k, v, dout;
};

// Forward, then backward from out rounded to bf16 (as the bf16 forward hands it on), on the
// CPU in f32. With jitter > 0 every input (and that out) is first scaled by 1 + jitter u, u
// uniform in [-1, 1]: a stand-in for the kernel's own bf16 roundings, to measure how much
// roundings of that size can move each output.
Results RunCpu(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, Inputs in, float jitter,
               uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto shake = [&](std::vector<float>& x) {
    if (jitter > 0.0f)
      for (float& e : x) e *= 1.0f + jitter * u(gen);
  };
  // Not q and k under the exp map: its row max would pick another argmax where two features
  // are within the jitter, moving that feature's gradient by the whole row's sum, while the
  // kernel takes the same max of the same bf16 values as the reference.
  if (cfg.feature_map != FeatureMap::exp) shake(in.q), shake(in.k);
  shake(in.v), shake(in.dout);
  const int64_t bh = dims.batch * dims.heads;
  Results r;
  r.out.resize(bh * dims.n_q * dims.e);
  r.den.resize(bh * dims.n_q);
  std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
  cpu::linear_attention_forward(dims, cfg, in.q.data(), in.k.data(), in.v.data(), r.out.data(), r.den.data(),
                                ws.data(), ws.size());
  for (float& x : r.out) x = bf16_round(x);
  std::vector<float> out = r.out;
  shake(out);
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.v.size());
  ws.assign(cpu::linear_attention_backward_workspace_floats(dims, cfg), 0.0f);
  cpu::linear_attention_backward(dims, cfg, in.q.data(), in.k.data(), in.v.data(), out.data(), r.den.data(),
                                 in.dout.data(), r.dq.data(), r.dk.data(), r.dv.data(), ws.data(), ws.size());
  return r;
}

// The relative size of the jitter: one rounding to bf16 (unit roundoff 2^-8); a product of two
// rounded operands moves by up to twice that, which kNoiseFloors = 3 covers.
constexpr float kJitter = 0x1p-8f;

constexpr uint32_t kJitterDraws = 4;

// x[i] = whichever of x[i], y[i] lies farther from want[i].
void KeepFarther(std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& want) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(y[i] - want[i]) > std::fabs(x[i] - want[i])) x[i] = y[i];
}

class LinearAttentionBf16Conformance : public Conformance {
 protected:
  DeviceArray<bf16> out_bf16(size_t n) const { return DeviceArray<bf16>(target(), n, kBf16Nan); }

  // Forward and backward on the CPU (f32, on the rounded inputs) and on the target (bf16).
  void Check(const Shape& s, bool causal, bool mask, FeatureMap fm, uint32_t seed, bool all_keys_of_last_batch = false) {
    const std::string what = Describe(s, causal, mask, fm);
    const int64_t bh = s.batch * s.heads;
    // identity takes features (positive, as a positive feature map's); elu1 and relu raw q, k
    // of either sign (mostly positive for relu, so that no query's keys all map to zero).
    const float lo = fm == FeatureMap::identity ? 0.05f : fm == FeatureMap::relu ? -0.3f : -1.0f;
    Inputs in;
    in.q = RoundedRandom(bh * s.n_q * s.d, lo, 1.0f, seed);
    in.k = RoundedRandom(bh * s.n_k * s.d, lo, 1.0f, seed + 1);
    in.v = RoundedRandom(bh * s.n_k * s.e, -1.0f, 1.0f, seed + 2);
    in.dout = RoundedRandom(bh * s.n_q * s.e, -1.0f, 1.0f, seed + 3);
    const auto pad = Padding(s.batch, s.n_k, all_keys_of_last_batch);
    const cpu::LinearAttentionDims dims{s.batch, s.heads, s.n_q, s.n_k, s.d, s.e};
    cpu::LinearAttentionConfig cfg;
    cfg.causal = causal;
    cfg.feature_map = fm;
    cfg.key_padding_mask = mask ? pad.data() : nullptr;
    const Results want = RunCpu(dims, cfg, in, 0.0f, 0);
    // Several draws, the largest response of each output kept: one draw over few rows can
    // happen to move an output much less than roundings of that size typically do.
    Results jittered = RunCpu(dims, cfg, in, kJitter, seed + 4);
    for (uint32_t draw = 1; draw < kJitterDraws; ++draw) {
      const Results more = RunCpu(dims, cfg, in, kJitter, seed + 4 + 1000 * draw);
      KeepFarther(jittered.out, more.out, want.out);
      KeepFarther(jittered.den, more.den, want.den);
      KeepFarther(jittered.dq, more.dq, want.dq);
      KeepFarther(jittered.dk, more.dk, want.dk);
      KeepFarther(jittered.dv, more.dv, want.dv);
    }

    auto dq_in = dev(ToBf16(in.q)), dk_in = dev(ToBf16(in.k)), dv_in = dev(ToBf16(in.v));
    auto ddout = dev(ToBf16(in.dout));
    auto dpad = dev(pad);
    cpu::LinearAttentionConfig dcfg = cfg;
    dcfg.key_padding_mask = mask ? dpad.get() : nullptr;
    auto got_out = out_bf16(want.out.size());
    auto got_den = out(want.den.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_bf16_forward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(),
              got_out.get(), got_den.get(), ws.get(), n);
    }
    EXPECT_TRUE(Bf16Close(ToFloat(got_out.host()), want.out, jittered.out)) << "out, " << what;
    EXPECT_TRUE(Bf16Close(got_den.host(), want.den, jittered.den)) << "den, " << what;

    // Backward from the CPU's (rounded) out and den, so that each gradient is compared on its own.
    auto out_in = dev(ToBf16(want.out));
    auto den_in = dev(want.den);
    auto got_dq = out_bf16(in.q.size()), got_dk = out_bf16(in.k.size()), got_dv = out_bf16(in.v.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_bf16_backward, dims, dcfg, dq_in.get(), dk_in.get(), dv_in.get(),
              out_in.get(), den_in.get(), ddout.get(), got_dq.get(), got_dk.get(), got_dv.get(), ws.get(), n);
    }
    EXPECT_TRUE(Bf16Close(ToFloat(got_dq.host()), want.dq, jittered.dq)) << "dq, " << what;
    EXPECT_TRUE(Bf16Close(ToFloat(got_dk.host()), want.dk, jittered.dk)) << "dk, " << what;
    EXPECT_TRUE(Bf16Close(ToFloat(got_dv.host()), want.dv, jittered.dv)) << "dv, " << what;
  }
};

constexpr int64_t kLengths[] = {1, 63, 64, 65};

// Sends calls to the scan kernels instead of the chunk-parallel ones for the scope.
class ScanKernelsOnly {
 public:
  explicit ScanKernelsOnly(Target target) : target_(target) { Set(false); }
  ~ScanKernelsOnly() { Set(true); }
  ScanKernelsOnly(const ScanKernelsOnly&) = delete;
  ScanKernelsOnly& operator=(const ScanKernelsOnly&) = delete;

 private:
  void Set(bool chunk_parallel) { TARN_ON(target_, linear_attention_bf16_set_chunk_parallel, chunk_parallel); }
  Target target_;
};

TEST_P(LinearAttentionBf16Conformance, CausalScanMatchesCpuAtChunkBoundaries) {
  uint32_t seed = 100;
  const int64_t dims[][2] = {{32, 64}, {64, 32}};
  for (const auto& de : dims)
    for (int64_t n : kLengths)
      for (bool mask : {false, true}) Check({2, 1, n, n, de[0], de[1]}, true, mask, FeatureMap::elu1, seed += 4);
}

// The causal cases above run chunk-parallel (kernels/cuda/linear_attention_chunked_bf16.cu);
// these run the scan kernels that still take other shapes and alignments.
TEST_P(LinearAttentionBf16Conformance, CausalScanKernelsMatchCpuWithChunkParallelOff) {
  const ScanKernelsOnly scan(target());
  uint32_t seed = 150;
  for (int64_t n : {int64_t{63}, int64_t{65}}) Check({2, 1, n, n, 32, 64}, true, true, FeatureMap::elu1, seed += 4);
  Check({1, 2, 300, 300, 64, 32}, true, true, FeatureMap::relu, seed += 4);
}

// Chunk-parallel: many chunks (states carried over 16 of them, the last partial), every width
// it pads (d, e of 8 .. 128 to 32, 64, 128), each map, several slices with padding, and calls
// wanting only some gradients.
TEST_P(LinearAttentionBf16Conformance, ChunkParallelMatchesCpuOverManyChunksAndWidths) {
  uint32_t seed = 170;
  Check({1, 1, 1000, 1000, 64, 64}, true, true, FeatureMap::elu1, seed += 4);
  const int64_t widths[][2] = {{8, 16}, {24, 40}, {64, 128}, {128, 128}, {96, 8}};
  for (const auto& de : widths) Check({2, 2, 130, 130, de[0], de[1]}, true, true, FeatureMap::elu1, seed += 4);
  for (FeatureMap fm : {FeatureMap::identity, FeatureMap::relu}) Check({3, 1, 129, 129, 64, 32}, true, true, fm, seed += 4);
}

// The bidirectional and cross-attention forms chunk-parallel: one total state over many key
// chunks, query and key counts apart (more of either), widths padded, padding in every slice.
TEST_P(LinearAttentionBf16Conformance, ChunkParallelBidirectionalAndCrossMatchCpu) {
  uint32_t seed = 190;
  Check({1, 1, 1000, 1000, 64, 64}, false, true, FeatureMap::elu1, seed += 4);
  Check({2, 2, 130, 300, 24, 40}, false, true, FeatureMap::relu, seed += 4);
  Check({2, 1, 300, 70, 64, 128}, false, true, FeatureMap::identity, seed += 4);
}

// The scan kernels, which still take the shapes the chunk-parallel ones do not, on the
// bidirectional and cross forms.
TEST_P(LinearAttentionBf16Conformance, NonCausalScanKernelsMatchCpuWithChunkParallelOff) {
  const ScanKernelsOnly scan(target());
  uint32_t seed = 160;
  Check({2, 1, 65, 65, 64, 32}, false, true, FeatureMap::elu1, seed += 4);
  Check({2, 1, 63, 200, 128, 32}, false, true, FeatureMap::elu1, seed += 4);
}

TEST_P(LinearAttentionBf16Conformance, ChunkParallelBackwardWritesOnlyTheGradientsAskedFor) {
  const cpu::LinearAttentionDims dims{1, 2, 100, 100, 32, 32};
  cpu::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.feature_map = FeatureMap::elu1;
  const int64_t rows = 2 * 100;
  auto q = dev(ToBf16(RoundedRandom(rows * 32, -1.0f, 1.0f, 1)));
  auto k = dev(ToBf16(RoundedRandom(rows * 32, -1.0f, 1.0f, 2)));
  auto v = dev(ToBf16(RoundedRandom(rows * 32, -1.0f, 1.0f, 3)));
  auto dout = dev(ToBf16(RoundedRandom(rows * 32, -1.0f, 1.0f, 4)));
  DeviceArray<bf16> o(target(), rows * 32, bf16_from_float(0.0f));
  auto den = out(rows);
  const size_t nf = TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg);
  auto wsf = out(nf);
  TARN_ON(target(), linear_attention_bf16_forward, dims, cfg, q.get(), k.get(), v.get(), o.get(), den.get(), wsf.get(),
          nf);
  const size_t nb = TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg);
  const bf16 sentinel = bf16_from_float(7.0f);
  for (int which = 0; which < 3; ++which) {
    DeviceArray<bf16> dq(target(), rows * 32, sentinel), dk(target(), rows * 32, sentinel),
        dv(target(), rows * 32, sentinel);
    auto ws = out(nb);
    TARN_ON(target(), linear_attention_bf16_backward, dims, cfg, q.get(), k.get(), v.get(), o.get(), den.get(),
            dout.get(), which == 0 ? dq.get() : nullptr, which == 1 ? dk.get() : nullptr,
            which == 2 ? dv.get() : nullptr, ws.get(), nb);
    const std::vector<bf16> got[] = {dq.host(), dk.host(), dv.host()};
    for (int g = 0; g < 3; ++g) {
      size_t sentinels = 0;
      for (const bf16& x : got[g]) sentinels += x.bits == sentinel.bits;
      if (g == which)
        EXPECT_LT(sentinels, got[g].size() / 10) << "gradient " << g << " was asked for but not written";
      else
        EXPECT_EQ(sentinels, got[g].size()) << "gradient " << g << " was written though not asked for";
    }
  }
}

TEST_P(LinearAttentionBf16Conformance, CausalScanOverManyChunksWithWideFeaturesMatchesCpu) {
  // 500 rows: 8 chunks, the last one partial; d = 128 (p = 128 + 16 with the ones column in the
  // backward scans) and two heads.
  Check({1, 2, 500, 500, 128, 64}, true, true, FeatureMap::elu1, 200);
}

TEST_P(LinearAttentionBf16Conformance, WidestFeaturesAndSeveralHeadsPerBatchMatchCpu) {
  // d = e = 256: p = 272 in the backward scans, the largest shared memory; B and H both above
  // 1, so that each (batch, head) slice must find its batch's padding row.
  Check({2, 2, 65, 65, 256, 256}, true, true, FeatureMap::elu1, 250);
  Check({2, 2, 20, 33, 48, 16}, false, true, FeatureMap::relu, 254);
}

TEST_P(LinearAttentionBf16Conformance, EveryFusedFeatureMapMatchesCpu) {
  uint32_t seed = 300;
  for (FeatureMap fm : {FeatureMap::identity, FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp}) {
    Check({2, 1, 65, 65, 32, 48}, true, true, fm, seed += 4);
    Check({2, 1, 65, 65, 64, 32}, false, true, fm, seed += 4);
  }
  // exp's backward needs whole rows of dL/dphi: d = 128 spans two column tiles of the scan.
  Check({1, 2, 65, 65, 128, 32}, true, true, FeatureMap::exp, seed += 4);
}

TEST_P(LinearAttentionBf16Conformance, BidirectionalSelfAttentionMatchesCpu) {
  uint32_t seed = 400;
  for (int64_t n : kLengths)
    for (bool mask : {false, true}) Check({2, 1, n, n, 64, 32}, false, mask, FeatureMap::elu1, seed += 4);
  Check({1, 2, 500, 500, 32, 128}, false, true, FeatureMap::elu1, seed += 4);
}

TEST_P(LinearAttentionBf16Conformance, CrossAttentionWithDifferentLengthsMatchesCpu) {
  uint32_t seed = 500;
  const int64_t pairs[][2] = {{1, 64}, {63, 200}, {200, 65}, {65, 1}};
  for (const auto& nn : pairs)
    for (bool mask : {false, true}) Check({2, 1, nn[0], nn[1], 128, 32}, false, mask, FeatureMap::elu1, seed += 4);
}

TEST_P(LinearAttentionBf16Conformance, SequenceSplitAcrossBlocksMatchesCpu) {
  uint32_t seed = 800;
  // 300 rows: 5 chunks of 64, so 2 and 3 segments are uneven, 4 leaves the last one empty and 64
  // is clamped to one segment per chunk.
  for (int split : {2, 3, 4, 64}) {
    SCOPED_TRACE("split=" + std::to_string(split));
    const ForcedSplit forced(target(), split);
    const FeatureMap fm = split == 3 ? FeatureMap::exp : FeatureMap::elu1;
    Check({1, 2, 300, 300, 32, 48}, true, true, fm, seed += 4);
    Check({1, 2, 300, 300, 48, 24}, false, true, fm, seed += 4);
    Check({1, 1, 130, 300, 32, 16}, false, true, FeatureMap::relu, seed += 4);  // cross: Nq != Nk
  }
  const ForcedSplit one_chunk(target(), 4);  // one chunk: a forced split has nothing to split
  Check({1, 1, 50, 50, 32, 32}, true, false, FeatureMap::elu1, seed += 4);
}

TEST_P(LinearAttentionBf16Conformance, QueriesWithEveryKeyPaddedGetZerosNotNan) {
  // The last batch's keys are all padded: den = 0, out = 0 and zero gradients, finite thanks to eps.
  Check({2, 1, 65, 65, 32, 64}, true, true, FeatureMap::elu1, 600, true);
  Check({2, 1, 40, 70, 32, 64}, false, true, FeatureMap::relu, 604, true);
}

TEST_P(LinearAttentionBf16Conformance, WidthsThatAreNotMultiplesOf16AreZeroPadded) {
  Check({1, 1, 65, 65, 40, 24}, true, true, FeatureMap::elu1, 700);
  Check({1, 1, 70, 30, 1, 1}, false, false, FeatureMap::elu1, 704);
}

TEST_P(LinearAttentionBf16Conformance, UnsupportedArgumentsAreRejected) {
  cpu::LinearAttentionConfig cfg;
  cfg.feature_map = FeatureMap::favor;  // not row-local: favor_forward first
  const cpu::LinearAttentionDims ok{1, 1, 4, 4, 32, 32};
  EXPECT_THROW(TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, ok, cfg), tarn::Error);
  cfg.feature_map = FeatureMap::elu1;
  const cpu::LinearAttentionDims too_wide{1, 1, 4, 4, 32, 257};
  EXPECT_THROW(TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, too_wide, cfg), tarn::Error);
  cfg.causal = true;
  const cpu::LinearAttentionDims cross{1, 1, 4, 5, 32, 32};
  EXPECT_THROW(TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, cross, cfg), tarn::Error);
}

TEST_P(LinearAttentionBf16Conformance, ChunkParallelWorkspaceIsItsStatesLinearInSequenceLength) {
  // Per (batch, head) and chunk of 64 rows, with d and e padded to D = 64: the chunk's own
  // state and vector in f32 (D (D + 1)), the carried state and its gradient in bf16 (D^2 / 2
  // floats each) and their vectors (D each).
  cpu::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.feature_map = FeatureMap::elu1;
  for (int64_t n : {int64_t{64}, int64_t{100000}}) {
    const cpu::LinearAttentionDims dims{2, 3, n, n, 64, 40};
    const size_t per_chunk = 64 * 65 + 64 * 64 + 2 * 64;
    const size_t want = std::max(static_cast<size_t>(2 * 3 * ((n + 63) / 64)) * per_chunk,
                                 static_cast<size_t>(2 * 3 * n * 41));  // or the scan kernels' G, if more
    EXPECT_EQ(TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg), want) << n;
    EXPECT_EQ(TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg), want) << n;
  }
}

TEST_P(LinearAttentionBf16Conformance, WorkspaceGrowsLinearlyInSequenceLength) {
  const ScanKernelsOnly scan(target());
  const ForcedSplit unsplit(target(), 1);
  for (bool causal : {true, false})
    for (FeatureMap fm : {FeatureMap::elu1, FeatureMap::exp}) {
    cpu::LinearAttentionConfig cfg;
    cfg.causal = causal;
    cfg.feature_map = fm;
    for (int64_t n : {int64_t{64}, int64_t{100000}}) {
      const cpu::LinearAttentionDims dims{2, 3, n, n, 64, 40};
      const cpu::LinearAttentionDims twice{2, 3, 2 * n, 2 * n, 64, 40};
      const size_t bwd = TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg);
      // G, plus for exp the rows' maxima of q and k and one (N, d) of dL/dphi.
      const int64_t exp_extra = fm == FeatureMap::exp ? 2 * n + n * 64 : 0;
      EXPECT_EQ(bwd, static_cast<size_t>(2 * 3 * (n * 41 + exp_extra)));
      EXPECT_EQ(TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, twice, cfg), 2 * bwd);
      EXPECT_EQ(TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, twice, cfg),
                2 * TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg));
    }
  }
}

TEST_P(LinearAttentionBf16Conformance, SplitWorkspaceStaysLinearInSequenceLength) {
  // When split, plus segments * d * (e + 1) per (batch, head), at most one segment per 2 chunks
  // of 64 rows (automatic) or per chunk (forced): linear in N whatever the split.
  const ScanKernelsOnly scan(target());
  for (int split : {0, 1000}) {
    const ForcedSplit forced(target(), split);
    for (bool causal : {true, false}) {
      cpu::LinearAttentionConfig cfg;
      cfg.causal = causal;
      for (int64_t n : {int64_t{64}, int64_t{1000}, int64_t{100000}}) {
        const cpu::LinearAttentionDims dims{1, 1, n, n, 64, 40};
        const size_t g = static_cast<size_t>(n * 41);
        const size_t states_bound = static_cast<size_t>(64 * 41) * static_cast<size_t>((n + 63) / 64);
        for (size_t ws : {TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg),
                          TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg)}) {
          EXPECT_GE(ws, g) << "n=" << n << " split=" << split;
          EXPECT_LE(ws, g + states_bound) << "n=" << n << " split=" << split;
        }
        if (split == 0 && n >= 1000) {  // B * H = 1: far fewer blocks than SMs on any device
          EXPECT_GT(TARN_ON(target(), linear_attention_bf16_backward_workspace_floats, dims, cfg), g)
              << "n=" << n << ": the automatic choice does not split";
        }
        if (split == 1000 && n == 1000) {  // 16 chunks: 16 segments
          EXPECT_EQ(TARN_ON(target(), linear_attention_bf16_forward_workspace_floats, dims, cfg),
                    g + static_cast<size_t>(16 * 64 * 41));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, LinearAttentionBf16Conformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
