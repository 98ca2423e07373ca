// The causal linear-attention kernels with each sequence split across threads
// (linear_attention_set_cpu_sequence_split): forward and every gradient against the naive
// double-precision reference of reference.h, for forced segment counts and the automatic
// split of a single (batch, head) slice.
#include <gtest/gtest.h>

#include <omp.h>

#include <string>

#include "kernels/check.h"
#include "kernels/linear_attention.h"
#include "tests/attention/isa.h"
#include "tests/attention/reference.h"

namespace tarn::attention_test {
namespace {

namespace k = kernels::cpu;

constexpr double kTolerance = 1e-5;  // as linear_attention_test.cpp

// Forces a segment count for one scope (0 = automatic, 1 = never).
class SequenceSplit {
 public:
  explicit SequenceSplit(int segments) { k::linear_attention_set_cpu_sequence_split(segments); }
  ~SequenceSplit() { k::linear_attention_set_cpu_sequence_split(0); }
  SequenceSplit(const SequenceSplit&) = delete;
  SequenceSplit& operator=(const SequenceSplit&) = delete;
};

struct SplitCase {
  std::string name;
  int segments;  // forced; 0 = automatic
  int64_t batch, heads, n, d, e;
  bool mask;
  FeatureMap map;
  int chunk;
};

std::ostream& operator<<(std::ostream& os, const SplitCase& c) { return os << c.name; }

struct Inputs {
  Floats q, k, v, dout, pad;
};

Inputs make_inputs(const SplitCase& c) {
  const size_t nd = c.batch * c.heads * c.n * c.d, ne = c.batch * c.heads * c.n * c.e;
  Inputs in;
  // identity needs positive features (den > 0); the other maps take Gaussian inputs.
  const bool positive = c.map == FeatureMap::identity;
  in.q = positive ? uniform_floats(nd, 1, 0.05f, 1.0f) : normal_floats(nd, 1);
  in.k = positive ? uniform_floats(nd, 2, 0.05f, 1.0f) : normal_floats(nd, 2);
  in.v = normal_floats(ne, 3);
  in.dout = normal_floats(ne, 4);
  in.pad = uniform_floats(c.batch * c.n, 5, 0.0f, 1.0f);
  for (auto& p : in.pad) p = p < 0.2f ? 1.0f : 0.0f;
  if (c.n > 0) in.pad[0] = 1.0f;  // the first query of batch 0 sees no key
  return in;
}

k::LinearAttentionConfig config_of(const SplitCase& c, const Inputs& in) {
  k::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.key_padding_mask = c.mask ? in.pad.data() : nullptr;
  cfg.chunk = c.chunk;
  cfg.feature_map = c.map;
  return cfg;
}

struct Outputs {
  Floats out, den, dq, dk, dv;
};

// Forward, then backward into whichever of dq, dk, dv are wanted (the others stay NaN).
Outputs run_kernel(const SplitCase& c, const Inputs& in, bool want_dq = true,
                   bool want_dk = true, bool want_dv = true) {
  const k::LinearAttentionDims dims{c.batch, c.heads, c.n, c.n, c.d, c.e};
  const k::LinearAttentionConfig cfg = config_of(c, in);
  Outputs o;
  o.out.assign(in.v.size(), NAN);
  o.den.assign(c.batch * c.heads * c.n, NAN);
  o.dq.assign(in.q.size(), NAN);
  o.dk.assign(in.k.size(), NAN);
  o.dv.assign(in.v.size(), NAN);
  Floats ws(k::linear_attention_forward_workspace_floats(dims, cfg), NAN);
  k::linear_attention_forward(dims, cfg, in.q.data(), in.k.data(), in.v.data(), o.out.data(),
                              o.den.data(), ws.data(), ws.size());
  ws.assign(k::linear_attention_backward_workspace_floats(dims, cfg), NAN);
  k::linear_attention_backward(dims, cfg, in.q.data(), in.k.data(), in.v.data(), o.out.data(),
                               o.den.data(), in.dout.data(), want_dq ? o.dq.data() : nullptr,
                               want_dk ? o.dk.data() : nullptr, want_dv ? o.dv.data() : nullptr,
                               ws.data(), ws.size());
  return o;
}

class SplitMatchesReference : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitMatchesReference, OutputsAndAllGradientsWithin1e5) {
  const SplitCase& c = GetParam();
  const Inputs in = make_inputs(c);
  const LinearShape s{c.batch, c.heads, c.n, c.n, c.d, c.e};
  const LinearRef ref = linear_reference(s, true, c.mask ? in.pad.data() : nullptr,
                                         k::kDefaultLinearAttentionEps, phi_rows(c.map, in.q, c.d),
                                         phi_rows(c.map, in.k, c.d), in.v, in.dout);
  const Doubles dq = phi_rows_backward(c.map, in.q, c.d, ref.da);
  const Doubles dk = phi_rows_backward(c.map, in.k, c.d, ref.db);
  const SequenceSplit split(c.segments);
  for (bool avx512 : isa_settings()) {
    SCOPED_TRACE(avx512 ? "AVX-512 tiles" : "build ISA tiles");
    const Avx512Tiles isa(avx512);
    const Outputs o = run_kernel(c, in);
    EXPECT_LE(relative_error(o.out, ref.out), kTolerance);
    EXPECT_LE(relative_error(o.den, ref.den), kTolerance);
    if (c.n > 1) {  // with one key dq, dk are below f32 resolution (linear_attention_test.cpp)
      EXPECT_LE(relative_error(o.dq, dq), kTolerance);
      EXPECT_LE(relative_error(o.dk, dk), kTolerance);
    }
    EXPECT_LE(relative_error(o.dv, ref.dv), kTolerance);
    EXPECT_TRUE(all_finite(o.out) && all_finite(o.dq) && all_finite(o.dk) && all_finite(o.dv));

    // Null gradient outputs: each wanted one alone is the same as with all three.
    const Outputs only_dq = run_kernel(c, in, true, false, false);
    const Outputs only_dk = run_kernel(c, in, false, true, false);
    const Outputs only_dv = run_kernel(c, in, false, false, true);
    EXPECT_EQ(only_dq.dq, o.dq);
    EXPECT_EQ(only_dk.dk, o.dk);
    EXPECT_EQ(only_dv.dv, o.dv);
  }
}

std::vector<SplitCase> cases() {
  std::vector<SplitCase> cs;
  const FeatureMap elu1 = FeatureMap::elu1;
  // Every length class, with short chunks below 128 rows so that those split too; d != e
  // and neither a multiple of the SIMD width; key padding.
  for (int segments : {2, 3, 7})
    for (int64_t n : {1, 63, 64, 65, 500, 1000}) {
      const std::string name = "seg" + std::to_string(segments) + "_n" + std::to_string(n);
      const int chunk = n <= 65 ? 8 : 64;
      cs.push_back({name, segments, 2, 1, n, 20, 36, true, elu1, chunk});
    }
  // Every row-local feature map, unpadded and padded, with d > e.
  for (FeatureMap map : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::identity})
    for (bool mask : {false, true})
      cs.push_back({std::string("seg3_") + k::feature_map_name(map) + (mask ? "_mask" : ""), 3, 1,
                    2, 300, 48, 17, mask, map, 32});
  // Automatic: a single slice, long enough to be split whenever there are 2+ threads.
  for (int64_t n : {1, 63, 64, 65, 500, 1000})
    cs.push_back({"auto_bh1_n" + std::to_string(n), 0, 1, 1, n, 32, 48, true, elu1, 16});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Kernels, SplitMatchesReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(LinearAttentionSplit, AutomaticSplitOfOneSliceNeedsStatesInTheWorkspace) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one thread: nothing to split across";
  const k::LinearAttentionDims dims{1, 1, 1000, 1000, 32, 48};
  k::LinearAttentionConfig cfg;
  cfg.causal = true;
  size_t never_fwd = 0, never_bwd = 0;
  {
    const SequenceSplit never(1);
    never_fwd = k::linear_attention_forward_workspace_floats(dims, cfg);
    never_bwd = k::linear_attention_backward_workspace_floats(dims, cfg);
  }
  // Split: a thread's buffers each, plus the segment states.
  EXPECT_GT(k::linear_attention_forward_workspace_floats(dims, cfg), 2 * never_fwd);
  EXPECT_GT(k::linear_attention_backward_workspace_floats(dims, cfg), 2 * never_bwd);
  cfg.causal = false;  // bidirectional is never split
  EXPECT_EQ(k::linear_attention_forward_workspace_floats(dims, cfg), never_fwd);
}

TEST(LinearAttentionSplit, WorkspaceWithoutSegmentStatesRunsUnsplitWithSameResult) {
  const SplitCase c{"fallback", 3, 1, 2, 200, 24, 40, true, FeatureMap::elu1, 16};
  const Inputs in = make_inputs(c);
  const k::LinearAttentionDims dims{c.batch, c.heads, c.n, c.n, c.d, c.e};
  const k::LinearAttentionConfig cfg = config_of(c, in);
  Outputs unsplit;
  {
    const SequenceSplit never(1);
    unsplit = run_kernel(c, in);
  }
  // Sized for one thread's buffers of the unsplit scan: the segment states do not fit.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Floats ws;
  {
    const SequenceSplit never(1);
    ws.assign(k::linear_attention_forward_workspace_floats(dims, cfg), NAN);
  }
  omp_set_num_threads(threads);
  const SequenceSplit split(c.segments);
  ASSERT_GT(k::linear_attention_forward_workspace_floats(dims, cfg), ws.size());
  Floats out(in.v.size(), NAN), den(c.batch * c.heads * c.n, NAN);
  k::linear_attention_forward(dims, cfg, in.q.data(), in.k.data(), in.v.data(), out.data(),
                              den.data(), ws.data(), ws.size());
  EXPECT_EQ(out, unsplit.out);
  EXPECT_EQ(den, unsplit.den);
}

TEST(LinearAttentionSplit, SetterRejectsNegativeCounts) {
  EXPECT_THROW(k::linear_attention_set_cpu_sequence_split(-1), Error);
}

}  // namespace
}  // namespace tarn::attention_test
