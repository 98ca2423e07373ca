// CUDA linear attention (kernels/cuda/linear_attention.cu) against the CPU kernels of
// kernels/linear_attention.h, f32: the causal chunked scan and its two backward scans, the
// bidirectional and cross-attention passes and the recurrent step, with the fused feature maps
// (elu1, relu, exp, identity: the kernels take the raw q, k and return dq, dk), key padding
// (including a batch row whose keys are all padded), sequence lengths around the scan's 32-row
// chunk and its 4-chunk split granularity (1, 63, 64, 65, 200, 500), d in {32, 64, 128} with
// d != e (and d, e up to 256), and the sequence split across blocks forced on (several
// segments) and off.
//
// Thread orders: the small shapes run under every emulated order (and on a GPU when there is
// one); the N = 500 shapes, whose barriers the small ones already exercise, run in the forward
// order and on the GPU only, so that the suite stays quick.
//
// The scan runs barrier-separated phases per chunk (load, masked chunk product, output tile,
// stores and state update; for bidirectional passes load and state update, then load, output
// tile and stores): with any one of the causal loop's or the bidirectional emit's
// __syncthreads() removed, the causal and split tests or the bidirectional and cross tests fail
// in all three orders; so do the split tests without the barrier before pass 1 copies out its
// state, and the fused-map tests without the barrier after the exp map's row maxima (each
// checked by removing it and rebuilding), and the step test fails in the forward and random
// orders without the step kernel's barrier. The barrier after pass 1's copy only matters when a
// block loops over several slices (more than 65535 (batch, head) pairs), which no test reaches.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/linear_attention_bound.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;
using cpu::FeatureMap;

// Tolerance: per element, the worst case of tests/cuda/linear_attention_bound.h for the kernels
// (f32 on CUDA cores: u = 2^-24 in any order of the chunk, state and segment sums; expf 2 ulps)
// plus the CPU's (u = 2^-24; its exp within 2.5 * 2^-24): the feature maps' roundings, products over
// d features, sums over up to Nk keys (Nq queries for the key gradients) and e values, out's
// division by den + eps and the chain through the map. Gradients that cancel (da, db with a
// single key: out = v whatever a) are bounded by their terms' magnitudes, not their size.
const std::vector<Rounding> kSides = {kCudaF32, kCpuF32};

struct Shape {
  int64_t batch, heads, n_q, n_k, d, e;
};

enum class Padding { none, some, all_of_batch_1 };

std::string Describe(const Shape& s, bool causal, Padding pad, FeatureMap map, int split) {
  std::ostringstream os;
  os << (causal ? "causal" : "bidirectional") << " B=" << s.batch << " H=" << s.heads << " Nq=" << s.n_q
     << " Nk=" << s.n_k << " d=" << s.d << " e=" << s.e << " phi=" << cpu::feature_map_name(map)
     << (pad == Padding::some ? " masked" : pad == Padding::all_of_batch_1 ? " batch 1 fully masked" : "")
     << " split=" << (split == 0 ? std::string("auto") : std::to_string(split));
  return os.str();
}

// Key padding: every third key and, in batch 0, the first keys too, so that with causal
// attention the first queries see no key at all (out = 0); or every key of batch 1.
std::vector<float> MakePadding(Padding kind, int64_t batch, int64_t n_k) {
  std::vector<float> pad(batch * n_k, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n_k; ++j) {
      const bool padded = kind == Padding::some ? (j % 3 == 1 || (b == 0 && j < 2)) : b == 1;
      pad[b * n_k + j] = kind != Padding::none && padded ? 1.0f : 0.0f;
    }
  return pad;
}

// Raw q, k for each map: positive features for identity; for the others values on both sides
// of the kinks (relu mostly positive, so that few rows lose every feature).
void InputRange(FeatureMap map, bool large, float& lo, float& hi) {
  switch (map) {
    case FeatureMap::identity: lo = 0.05f, hi = 1.0f; break;
    case FeatureMap::elu1: lo = -2.0f, hi = 2.0f; break;
    case FeatureMap::relu: lo = -0.3f, hi = 1.0f; break;
    default: lo = -3.0f, hi = 3.0f; break;
  }
  if (large) lo *= 15.0f, hi *= 15.0f;
}

bool AllFinite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

struct Case {
  Shape shape;
  bool causal = true;
  Padding pad = Padding::none;
  FeatureMap map = FeatureMap::identity;
  int split = 0;       // forced segments, 0 = automatic
  bool large = false;  // large-magnitude q, k
};

class LinearAttentionConformance : public Conformance {
 protected:
  // The big shapes run in one emulated order (and on the GPU).
  bool OneOrderOnly() const { return target() == Target::emu_reverse || target() == Target::emu_random; }

  // Runs forward and backward on the CPU and on the target, compares every output.
  void Check(const Case& c, uint32_t seed) {
    const Shape& s = c.shape;
    const std::string what = Describe(s, c.causal, c.pad, c.map, c.split);
    const int64_t bh = s.batch * s.heads;
    float lo, hi;
    InputRange(c.map, c.large, lo, hi);
    const auto a = Random(bh * s.n_q * s.d, lo, hi, seed);
    const auto b = Random(bh * s.n_k * s.d, lo, hi, seed + 1);
    const auto v = Random(bh * s.n_k * s.e, -1.0f, 1.0f, seed + 2);
    const auto dout = Random(bh * s.n_q * s.e, -1.0f, 1.0f, seed + 3);
    const auto pad = MakePadding(c.pad, s.batch, s.n_k);
    const cpu::LinearAttentionDims dims{s.batch, s.heads, s.n_q, s.n_k, s.d, s.e};
    cpu::LinearAttentionConfig cfg;
    cfg.causal = c.causal;
    cfg.key_padding_mask = c.pad != Padding::none ? pad.data() : nullptr;
    cfg.feature_map = c.map;

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

    const ForcedSplit split(target(), c.split);
    auto da_in = dev(a), db_in = dev(b), dv_in = dev(v), ddout = dev(dout), dpad = dev(pad);
    cpu::LinearAttentionConfig dcfg = cfg;
    dcfg.key_padding_mask = c.pad != Padding::none ? dpad.get() : nullptr;
    auto got_out = out(want_out.size()), got_den = out(want_den.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_forward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_forward, dims, dcfg, da_in.get(), db_in.get(), dv_in.get(), got_out.get(),
              got_den.get(), ws.get(), n);
    }
    LinearAttentionBoundConfig bcfg;
    bcfg.causal = c.causal;
    bcfg.map = c.map;
    if (c.pad != Padding::none) bcfg.pad = pad;
    const LinearAttentionBounds bound =
        LinearAttentionErrorBounds(dims, bcfg, a, b, v, dout, want_out, want_den, kSides);
    Compare(got_out.host(), want_out, bound.out, "out, " + what);
    Compare(got_den.host(), want_den, bound.den, "den, " + what);

    // Backward from the CPU's out and den, so that each gradient is compared on its own.
    auto out_in = dev(want_out), den_in = dev(want_den);
    auto got_da = out(a.size()), got_db = out(b.size()), got_dv = out(v.size());
    {
      const size_t n = TARN_ON(target(), linear_attention_backward_workspace_floats, dims, dcfg);
      auto ws = out(n);
      TARN_ON(target(), linear_attention_backward, dims, dcfg, da_in.get(), db_in.get(), dv_in.get(), out_in.get(),
              den_in.get(), ddout.get(), got_da.get(), got_db.get(), got_dv.get(), ws.get(), n);
    }
    Compare(got_da.host(), want_da, bound.da, "da, " + what);
    Compare(got_db.host(), want_db, bound.db, "db, " + what);
    Compare(got_dv.host(), want_dv, bound.dv, "dv, " + what);
    if (c.pad == Padding::all_of_batch_1) ExpectBatchOneSilent(c, got_out.host(), got_den.host(), got_db.host());
  }

  // Every element within its bound. (A normwise check, ||got - want|| <= 1e-4 ||want|| beside
  // the elementwise 2e-4 |want| + 2e-5 these bounds replace, adds nothing to a worst case.)
  void Compare(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound,
               const std::string& what) {
    EXPECT_TRUE(AllFinite(got)) << what;
    EXPECT_TRUE(WithinBound(got, want, bound)) << what;
  }

  // A batch row whose keys are all padded reads nothing: out, den and its key gradients are 0.
  void ExpectBatchOneSilent(const Case& c, const std::vector<float>& out, const std::vector<float>& den,
                            const std::vector<float>& db) {
    const Shape& s = c.shape;
    const int64_t per_out = s.heads * s.n_q * s.e, per_den = s.heads * s.n_q, per_db = s.heads * s.n_k * s.d;
    for (int64_t i = 0; i < per_out; ++i) ASSERT_EQ(out[per_out + i], 0.0f) << "out of the fully padded batch";
    for (int64_t i = 0; i < per_den; ++i) ASSERT_EQ(den[per_den + i], 0.0f) << "den of the fully padded batch";
    for (int64_t i = 0; i < per_db; ++i) ASSERT_EQ(db[per_db + i], 0.0f) << "db of the fully padded batch";
  }
};

// d = 32 with e = 48 (two output tiles plus the ones column) and d = 64 with e = 40.
constexpr int64_t kDims[][2] = {{32, 48}, {64, 40}};
constexpr int64_t kLengths[] = {1, 63, 64, 65, 200};
constexpr FeatureMap kFusedMaps[] = {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::identity};

TEST_P(LinearAttentionConformance, CausalScanForwardAndBackwardMatchCpuAtChunkBoundaries) {
  uint32_t seed = 700;
  for (const auto& de : kDims)
    for (int64_t n : kLengths)
      for (Padding pad : {Padding::none, Padding::some}) {
        Case c;
        c.shape = {2, 1, n, n, de[0], de[1]};
        c.pad = pad;
        Check(c, seed += 4);
      }
}

TEST_P(LinearAttentionConformance, WideFeaturesAndValuesUpTo256MatchCpu) {
  // d and e at 128 (the state's p x 33 tile at its largest in use), several heads.
  Case c;
  c.shape = {1, 2, 130, 130, 128, 96};
  c.pad = Padding::some;
  Check(c, 800);
  c.shape = {1, 1, 97, 97, 16, 128};
  c.pad = Padding::none;
  c.map = FeatureMap::elu1;
  Check(c, 804);
  // The widest head the issue asks for: d = 256 (the dA, dB scans' state is 201 x 33) and
  // e = 256 (p = 257 in those scans: 106 KiB of shared memory, past the 48 KiB default).
  c.shape = {1, 1, 40, 40, 256, 200};
  c.map = FeatureMap::exp;
  Check(c, 808);
  c.shape = {1, 1, 40, 40, 64, 256};
  c.causal = false;
  c.map = FeatureMap::relu;
  Check(c, 812);
}

TEST_P(LinearAttentionConformance, BidirectionalSelfAttentionMatchesCpu) {
  uint32_t seed = 900;
  for (const auto& de : kDims)
    for (int64_t n : kLengths)
      for (Padding pad : {Padding::none, Padding::some}) {
        Case c;
        c.shape = {2, 1, n, n, de[0], de[1]};
        c.causal = false;
        c.pad = pad;
        Check(c, seed += 4);
      }
}

// Nq != Nk, including no queries (no outputs, zero key gradients) and no keys (zero outputs).
TEST_P(LinearAttentionConformance, CrossAttentionWithDifferentLengthsMatchesCpu) {
  uint32_t seed = 1000;
  const int64_t pairs[][2] = {{1, 64}, {63, 200}, {200, 65}, {65, 1}, {0, 40}, {40, 0}};
  for (const auto& nn : pairs)
    for (Padding pad : {Padding::none, Padding::some}) {
      Case c;
      c.shape = {2, 1, nn[0], nn[1], 64, 40};
      c.causal = false;
      c.pad = pad;
      Check(c, seed += 4);
    }
}

// Every fused map on the causal scan, bidirectional and cross attention, with padding.
TEST_P(LinearAttentionConformance, FusedFeatureMapsMatchCpuFeatureMapThenAttention) {
  uint32_t seed = 1200;
  for (FeatureMap map : kFusedMaps)
    for (bool causal : {true, false})
      for (int64_t n : {int64_t{1}, int64_t{65}}) {
        Case c;
        c.shape = {2, 2, n, causal ? n : 70, 32, 24};
        c.causal = causal;
        c.pad = Padding::some;
        c.map = map;
        Check(c, seed += 4);
      }
}

// exp (and elu1) on q, k of magnitude up to 45: the row max keeps exp in range, nothing
// overflows, and the gradient through the max matches the CPU's.
TEST_P(LinearAttentionConformance, LargeMagnitudeInputsStayFiniteUnderExp) {
  uint32_t seed = 1300;
  for (FeatureMap map : {FeatureMap::exp, FeatureMap::elu1})
    for (bool causal : {true, false}) {
      Case c;
      c.shape = {1, 2, 70, 70, 32, 40};
      c.causal = causal;
      c.map = map;
      c.large = true;
      Check(c, seed += 4);
    }
}

// A batch row whose keys are all padded: zeros out, zero den, zero key gradients, no NaN.
TEST_P(LinearAttentionConformance, FullyPaddedBatchRowGivesZerosNotNan) {
  uint32_t seed = 1400;
  for (bool causal : {true, false})
    for (FeatureMap map : {FeatureMap::elu1, FeatureMap::exp}) {
      Case c;
      c.shape = {2, 2, 40, causal ? 40 : 67, 32, 48};
      c.causal = causal;
      c.pad = Padding::all_of_batch_1;
      c.map = map;
      Check(c, seed += 4);
      c.split = 2;
      Check(c, seed += 4);
    }
}

// The sequence split across blocks (pass 1 segment sums, pass 2 prefix / suffix / total,
// pass 3 scans from the segment's state), forced to several segments, including more
// segments than chunks (clamped) and uneven last segments.
TEST_P(LinearAttentionConformance, SequenceSplitAcrossBlocksMatchesCpu) {
  uint32_t seed = 1500;
  for (int split : {2, 3, 16})
    for (bool causal : {true, false}) {
      Case c;
      c.shape = {1, 2, 200, causal ? 200 : 130, 32, 40};
      c.causal = causal;
      c.pad = Padding::some;
      c.map = split == 3 ? FeatureMap::exp : FeatureMap::elu1;
      c.split = split;
      Check(c, seed += 4);
    }
  Case tiny;  // one chunk: a forced split has nothing to split
  tiny.shape = {2, 1, 20, 20, 32, 48};
  tiny.split = 4;
  Check(tiny, seed += 4);
}

// N = 500 with d in {32, 64, 128}, d != e: split automatic (here: B*H*tiles is far below the
// 132 SMs the emulator reports, so 500 rows run as 4 segments) and forced off.
TEST_P(LinearAttentionConformance, LongSequencesWithEveryFeatureDimMatchCpu) {
  if (OneOrderOnly()) GTEST_SKIP() << "the long shapes run in the forward order (the small ones cover every order)";
  uint32_t seed = 1600;
  const int64_t de[][2] = {{32, 64}, {64, 32}, {128, 80}};
  int round = 0;
  for (const auto& p : de)
    for (bool causal : {true, false}) {
      Case c;
      c.shape = {1, 1, 500, causal ? 500 : 300, p[0], p[1]};
      c.causal = causal;
      c.pad = round % 2 ? Padding::some : Padding::none;
      c.map = kFusedMaps[round++ % 4];
      c.split = round % 3 == 0 ? 1 : 0;
      Check(c, seed += 4);
    }
}

TEST_P(LinearAttentionConformance, RecurrentStepMatchesCpuStepByStep) {
  const int64_t batch = 2, heads = 2, d = 32, e = 48, steps = 5;
  for (FeatureMap map : kFusedMaps) {
    const cpu::LinearAttentionDims dims{batch, heads, 1, 1, d, e};
    std::vector<float> want_state(batch * heads * cpu::linear_attention_state_floats(d, e), 0.0f);
    auto state = dev(want_state);
    float lo, hi;
    InputRange(map, false, lo, hi);
    std::vector<std::vector<float>> seen_b, seen_v, seen_pad;  // every step so far, for the bounds
    for (int64_t t = 0; t < steps; ++t) {
      const auto a = Random(batch * heads * d, lo, hi, 1100 + 3 * t);
      const auto b = Random(batch * heads * d, lo, hi, 1101 + 3 * t);
      const auto v = Random(batch * heads * e, -1.0f, 1.0f, 1102 + 3 * t);
      // Batch 1 pads its first two tokens: its outputs stay zero until its first real key.
      const std::vector<float> pad = {0.0f, t < 2 ? 1.0f : 0.0f};
      seen_b.push_back(b), seen_v.push_back(v), seen_pad.push_back(pad);
      cpu::LinearAttentionConfig cfg;
      cfg.key_padding_mask = pad.data();
      cfg.feature_map = map;
      std::vector<float> want_out(batch * heads * e);
      cpu::linear_attention_step(dims, cfg, a.data(), b.data(), v.data(), want_state.data(), want_out.data());
      auto da = dev(a), db = dev(b), dv = dev(v), dpad = dev(pad);
      cfg.key_padding_mask = dpad.get();
      auto got = out(want_out.size());
      TARN_ON(target(), linear_attention_step, dims, cfg, da.get(), db.get(), dv.get(), state.get(), got.get());
      const std::string what = std::string(cpu::feature_map_name(map)) + " step " + std::to_string(t);
      // The step's out is the causal op's last row over the t + 1 steps so far, and the state
      // their sum: each side's error accumulates over the steps (the device goes on from its
      // own state).
      const int64_t n = t + 1;
      std::vector<float> keys(batch * heads * n * d), values(batch * heads * n * e), pads(batch * n);
      for (int64_t x = 0; x < batch * heads; ++x)
        for (int64_t u = 0; u < n; ++u) {
          std::copy_n(seen_b[u].begin() + x * d, d, keys.begin() + (x * n + u) * d);
          std::copy_n(seen_v[u].begin() + x * e, e, values.begin() + (x * n + u) * e);
        }
      for (int64_t x = 0; x < batch; ++x)
        for (int64_t u = 0; u < n; ++u) pads[x * n + u] = seen_pad[u][x];
      LinearAttentionBoundConfig bcfg;
      bcfg.map = map;
      bcfg.pad = pads;
      const LinearAttentionBounds bound = LinearAttentionErrorBounds({batch, heads, 1, n, d, e}, bcfg, a, keys, values,
                                                                     {}, {}, {}, kSides);
      EXPECT_TRUE(WithinBound(got.host(), want_out, bound.out)) << what;
      EXPECT_TRUE(WithinBound(state.host(), want_state,
                              LinearAttentionStateErrorBound(batch * heads, heads, n, d, e, map, keys, values, pads,
                                                             kSides)))
          << "state after " << what;
    }
  }
}

// Gradients passed as null are skipped (their scans do not run) and the others are unchanged:
// da alone, then db and dv alone, against the CPU's full backward.
TEST_P(LinearAttentionConformance, BackwardComputesOnlyTheRequestedGradients) {
  const int64_t B = 1, H = 2, N = 70, d = 32, e = 40;
  const cpu::LinearAttentionDims dims{B, H, N, N, d, e};
  for (bool causal : {true, false}) {
    cpu::LinearAttentionConfig cfg;
    cfg.causal = causal;
    cfg.feature_map = FeatureMap::exp;
    const auto a = Random(B * H * N * d, -2.0f, 2.0f, 1700), b = Random(B * H * N * d, -2.0f, 2.0f, 1701);
    const auto v = Random(B * H * N * e, -1.0f, 1.0f, 1702), dout = Random(B * H * N * e, -1.0f, 1.0f, 1703);
    std::vector<float> o(B * H * N * e), den(B * H * N), da(a.size()), db(b.size()), dv(v.size());
    std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(dims, cfg));
    cpu::linear_attention_forward(dims, cfg, a.data(), b.data(), v.data(), o.data(), den.data(), ws.data(),
                                  ws.size());
    ws.assign(cpu::linear_attention_backward_workspace_floats(dims, cfg), 0.0f);
    cpu::linear_attention_backward(dims, cfg, a.data(), b.data(), v.data(), o.data(), den.data(), dout.data(),
                                   da.data(), db.data(), dv.data(), ws.data(), ws.size());
    auto ga = dev(a), gb = dev(b), gv = dev(v), go = dev(o), gden = dev(den), gdout = dev(dout);
    const size_t n = TARN_ON(target(), linear_attention_backward_workspace_floats, dims, cfg);
    auto gws = out(n);
    auto got_da = out(a.size()), got_db = out(b.size()), got_dv = out(v.size());
    TARN_ON(target(), linear_attention_backward, dims, cfg, ga.get(), gb.get(), gv.get(), go.get(), gden.get(),
            gdout.get(), got_da.get(), nullptr, nullptr, gws.get(), n);
    LinearAttentionBoundConfig bcfg;
    bcfg.causal = causal;
    bcfg.map = FeatureMap::exp;
    const LinearAttentionBounds bound = LinearAttentionErrorBounds(dims, bcfg, a, b, v, dout, o, den, kSides);
    EXPECT_TRUE(WithinBound(got_da.host(), da, bound.da)) << "da alone, causal=" << causal;
    for (float x : got_db.host()) ASSERT_TRUE(std::isnan(x)) << "db written though not requested";
    TARN_ON(target(), linear_attention_backward, dims, cfg, ga.get(), gb.get(), gv.get(), go.get(), gden.get(),
            gdout.get(), nullptr, got_db.get(), got_dv.get(), gws.get(), n);
    EXPECT_TRUE(WithinBound(got_db.host(), db, bound.db)) << "db without da, causal=" << causal;
    EXPECT_TRUE(WithinBound(got_dv.host(), dv, bound.dv)) << "dv without da, causal=" << causal;
  }
}

TEST_P(LinearAttentionConformance, FavorIsRejectedSinceItIsNotRowLocal) {
  const cpu::LinearAttentionDims dims{1, 1, 4, 4, 8, 8};
  cpu::LinearAttentionConfig cfg;
  cfg.feature_map = FeatureMap::favor;
  EXPECT_THROW(TARN_ON(target(), linear_attention_forward_workspace_floats, dims, cfg), tarn::Error);
  EXPECT_THROW(TARN_ON(target(), linear_attention_backward_workspace_floats, dims, cfg), tarn::Error);
}

TEST_P(LinearAttentionConformance, WorkspaceGrowsLinearlyInSequenceLength) {
  // The backward recomputes its states (docs/design.md section 2): its scratch is G, (B, H, N, e + 1),
  // plus, when the sequence is split, segments * d * (e + 1) per (batch, head), with at most one
  // segment per 4 chunks of 32 rows: linear in N whatever the split.
  for (int split : {1, 0, 1000})
    for (bool causal : {true, false}) {
      const ForcedSplit forced(target(), split);
      cpu::LinearAttentionConfig cfg;
      cfg.causal = causal;
      for (int64_t n : {int64_t{64}, int64_t{1000}, int64_t{100000}}) {
        const cpu::LinearAttentionDims dims{2, 3, n, n, 64, 40};
        const size_t fwd = TARN_ON(target(), linear_attention_forward_workspace_floats, dims, cfg);
        const size_t bwd = TARN_ON(target(), linear_attention_backward_workspace_floats, dims, cfg);
        const size_t g = static_cast<size_t>(2 * 3 * n * 41);
        const size_t chunks = static_cast<size_t>((n + 31) / 32);
        const size_t states_bound = static_cast<size_t>(2 * 3 * 64 * 41) * chunks;
        if (split == 1) {
          EXPECT_EQ(bwd, g);
          EXPECT_EQ(fwd, g);
        }
        EXPECT_GE(bwd, g);
        EXPECT_LE(bwd, g + states_bound) << "n=" << n << " split=" << split;
        EXPECT_LE(fwd, g + states_bound) << "n=" << n << " split=" << split;
      }
    }
}

TEST_P(LinearAttentionConformance, NegativeSplitIsRejected) {
  EXPECT_THROW(TARN_ON(target(), linear_attention_set_sequence_split, -1), tarn::Error);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, LinearAttentionConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
