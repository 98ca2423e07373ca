// The linear-attention kernels (causal chunked scan, bidirectional, cross, recurrent step)
// against the naive double-precision reference of reference.h.
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

constexpr double kTolerance = 1e-5;  // max abs error / max abs reference, f32 vs double

struct Case {
  std::string name;
  int64_t batch, heads, n_q, n_k, d, e;
  bool causal;
  bool mask;
  FeatureMap map;
  int chunk;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

struct Outputs {
  Floats out, den, dq, dk, dv;
};

k::LinearAttentionDims dims_of(const Case& c) {
  return {c.batch, c.heads, c.n_q, c.n_k, c.d, c.e};
}

Outputs run_kernel(const Case& c, const Floats& q, const Floats& kk, const Floats& v,
                   const Floats& dout, const Floats& pad) {
  const k::LinearAttentionDims dims = dims_of(c);
  k::LinearAttentionConfig cfg;
  cfg.causal = c.causal;
  cfg.key_padding_mask = c.mask ? pad.data() : nullptr;
  cfg.chunk = c.chunk;
  cfg.feature_map = c.map;
  Outputs o;
  o.out.assign(c.batch * c.heads * c.n_q * c.e, NAN);
  o.den.assign(c.batch * c.heads * c.n_q, NAN);
  o.dq.assign(q.size(), NAN);
  o.dk.assign(kk.size(), NAN);
  o.dv.assign(v.size(), NAN);
  Floats ws(k::linear_attention_forward_workspace_floats(dims, cfg), NAN);
  k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), o.out.data(),
                              o.den.data(), ws.data(), ws.size());
  ws.assign(k::linear_attention_backward_workspace_floats(dims, cfg), NAN);
  k::linear_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), o.out.data(),
                               o.den.data(), dout.data(), o.dq.data(), o.dk.data(), o.dv.data(),
                               ws.data(), ws.size());
  return o;
}

// Padding: batch 0 pads its first key (so its first causal query sees nothing) and about a
// fifth of the rest; batch 1 pads every key; later batches pad at random.
Floats make_padding(int64_t batch, int64_t n_k, uint32_t seed) {
  Floats pad = uniform_floats(batch * n_k, seed, 0.0f, 1.0f);
  for (auto& p : pad) p = p < 0.2f ? 1.0f : 0.0f;
  if (n_k > 0) pad[0] = 1.0f;
  if (batch > 1) std::fill(pad.begin() + n_k, pad.begin() + 2 * n_k, 1.0f);
  return pad;
}

// identity is only well-posed with positive features (den > 0), as in an ablation on
// already-positive inputs; the other maps take Gaussian inputs.
Floats make_qk(const Case& c, size_t n, uint32_t seed) {
  return c.map == FeatureMap::identity ? uniform_floats(n, seed, 0.05f, 1.0f)
                                       : normal_floats(n, seed);
}

class LinearAttentionMatchesReference : public ::testing::TestWithParam<Case> {};

TEST_P(LinearAttentionMatchesReference, OutputsAndAllGradientsWithin1e5) {
  const Case& c = GetParam();
  const Floats q = make_qk(c, c.batch * c.heads * c.n_q * c.d, 1);
  const Floats kk = make_qk(c, c.batch * c.heads * c.n_k * c.d, 2);
  const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 3);
  const Floats dout = normal_floats(c.batch * c.heads * c.n_q * c.e, 4);
  const Floats pad = make_padding(c.batch, c.n_k, 5);

  const LinearShape s{c.batch, c.heads, c.n_q, c.n_k, c.d, c.e};
  const LinearRef ref = linear_reference(s, c.causal, c.mask ? pad.data() : nullptr,
                                         k::kDefaultLinearAttentionEps, phi_rows(c.map, q, c.d),
                                         phi_rows(c.map, kk, c.d), v, dout);
  const Doubles dq = phi_rows_backward(c.map, q, c.d, ref.da);
  const Doubles dk = phi_rows_backward(c.map, kk, c.d, ref.db);
  // With a single key, out = v w / (w + eps) depends on a and b only through eps: the exact
  // dq, dk are ~1e-6 of their cancelling terms, below f32 resolution. There the error is
  // measured against the terms' magnitude (what rounding scales with); elsewhere against
  // max |reference|, which is 10-50x stricter.
  const bool eps_only = c.n_k == 1;
  for (bool avx512 : isa_settings()) {
    SCOPED_TRACE(avx512 ? "AVX-512 tiles" : "build ISA tiles");
    const Avx512Tiles isa(avx512);
    const Outputs o = run_kernel(c, q, kk, v, dout, pad);
    EXPECT_LE(relative_error(o.out, ref.out), kTolerance);
    EXPECT_LE(relative_error(o.den, ref.den), kTolerance);
    EXPECT_LE(eps_only ? relative_error(o.dq, dq, phi_rows_backward(c.map, q, c.d, ref.da_terms))
                       : relative_error(o.dq, dq),
              kTolerance);
    EXPECT_LE(eps_only ? relative_error(o.dk, dk, phi_rows_backward(c.map, kk, c.d, ref.db_terms))
                       : relative_error(o.dk, dk),
              kTolerance);
    EXPECT_LE(relative_error(o.dv, ref.dv), kTolerance);
    EXPECT_TRUE(all_finite(o.out) && all_finite(o.dq) && all_finite(o.dk) && all_finite(o.dv));
  }
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  const FeatureMap elu1 = FeatureMap::elu1;
  // Causal, every length class: single token, below / at / above one chunk, long tails.
  for (int64_t n : {1, 63, 64, 65, 500, 1000})
    cs.push_back({"causal_n" + std::to_string(n), 1, n > 500 ? 1 : 2, n, n, 64, 48, true, false,
                  elu1, 64});
  // Feature dims, with e != d, including widths that are not multiples of the SIMD width.
  for (auto [d, e] : {std::pair<int64_t, int64_t>{32, 80}, {128, 16}, {20, 36}, {256, 200}, {17, 250}})
    cs.push_back({"causal_d" + std::to_string(d) + "_e" + std::to_string(e), 1, 2, 130, 130, d,
                  e, true, false, elu1, 64});
  // Every row-local feature map fused into the kernel.
  for (FeatureMap map : {FeatureMap::relu, FeatureMap::exp, FeatureMap::identity}) {
    const std::string name = k::feature_map_name(map);
    cs.push_back({"causal_" + name, 2, 1, 130, 130, 32, 40, true, false, map, 64});
    cs.push_back({"bidirectional_" + name, 2, 1, 90, 90, 32, 40, false, false, map, 64});
  }
  // Chunk sizes that do and do not divide N, and chunk > N.
  for (int chunk : {1, 7, 16, 100, 256})
    cs.push_back({"causal_chunk" + std::to_string(chunk), 1, 1, 130, 130, 32, 48, true, false,
                  elu1, chunk});
  // Key padding, including a query with no visible key and a batch with every key padded.
  cs.push_back({"causal_mask", 3, 2, 150, 150, 32, 48, true, true, elu1, 32});
  cs.push_back({"causal_mask_odd_e", 3, 1, 90, 90, 24, 19, true, true, elu1, 20});
  cs.push_back({"bidirectional_mask", 3, 2, 70, 70, 32, 48, false, true, elu1, 64});
  // Bidirectional, and cross-attention with Nq != Nk both ways.
  for (int64_t n : {1, 63, 64, 65, 500, 1000})
    cs.push_back({"bidirectional_n" + std::to_string(n), 1, n > 500 ? 1 : 2, n, n, 64, 48, false,
                  false, elu1, 64});
  cs.push_back({"bidirectional_d128_e32", 1, 2, 100, 100, 128, 32, false, false, elu1, 64});
  cs.push_back({"cross_nq70_nk200", 2, 2, 70, 200, 64, 27, false, false, elu1, 64});
  cs.push_back({"cross_nq300_nk9_mask", 2, 1, 300, 9, 128, 64, false, true, elu1, 64});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Kernels, LinearAttentionMatchesReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(LinearAttention, ReferenceGradientMatchesFiniteDifferences) {
  // Checks the reference itself, so that the kernel is not compared with a wrong formula.
  const LinearShape s{1, 1, 5, 5, 3, 2};
  const Floats q = uniform_floats(15, 11, 0.1f, 1.0f), kk = uniform_floats(15, 12, 0.1f, 1.0f);
  const Floats v = normal_floats(10, 13), dout = normal_floats(10, 14);
  const Doubles a(q.begin(), q.end()), b(kk.begin(), kk.end());
  const LinearRef ref = linear_reference(s, true, nullptr, 1e-6, a, b, v, dout);
  auto loss = [&](const Doubles& aa, const Doubles& bb, const Floats& vv) {
    const LinearRef r = linear_reference(s, true, nullptr, 1e-6, aa, bb, vv, dout);
    double l = 0.0;
    for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * dout[i];
    return l;
  };
  constexpr double h = 1e-6;
  for (size_t i = 0; i < a.size(); ++i) {
    Doubles ap = a, am = a;
    ap[i] += h, am[i] -= h;
    EXPECT_NEAR((loss(ap, b, v) - loss(am, b, v)) / (2 * h), ref.da[i], 1e-6);
    Doubles bp = b, bm = b;
    bp[i] += h, bm[i] -= h;
    EXPECT_NEAR((loss(a, bp, v) - loss(a, bm, v)) / (2 * h), ref.db[i], 1e-6);
  }
}

TEST(LinearAttention, FullyPaddedQueriesGetZerosNotNaN) {
  const Case c{"all_padded", 2, 2, 40, 40, 32, 16, true, true, FeatureMap::elu1, 16};
  const Floats q = normal_floats(c.batch * c.heads * c.n_q * c.d, 21);
  const Floats kk = normal_floats(q.size(), 22);
  const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 23);
  const Floats dout = normal_floats(v.size(), 24);
  Floats pad(c.batch * c.n_k, 1.0f);  // every key padded in both batches
  const Outputs o = run_kernel(c, q, kk, v, dout, pad);
  for (float x : o.out) ASSERT_EQ(x, 0.0f);
  for (float x : o.dk) ASSERT_EQ(x, 0.0f);
  for (float x : o.dv) ASSERT_EQ(x, 0.0f);
  EXPECT_TRUE(all_finite(o.dq));
}

// Inputs of magnitude 1000: exp(x - row max) underflows for all but a few features of each row,
// and a . b falls to the scale of eps for most pairs. Finite is not enough: the stabilised
// kernel must still agree with the double reference (which subtracts the same row max).
TEST(LinearAttention, LargeMagnitudeExpInputsMatchTheReference) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const Case c{"exp_large", 1, 2, 100, 100, 32, 16, causal, false, FeatureMap::exp, 64};
    const Floats q = normal_floats(c.batch * c.heads * c.n_q * c.d, 31, 1000.0f);
    const Floats kk = normal_floats(q.size(), 32, 1000.0f);
    const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 33);
    const Floats dout = normal_floats(v.size(), 34);
    const Outputs o = run_kernel(c, q, kk, v, dout, {});
    const LinearShape s{c.batch, c.heads, c.n_q, c.n_k, c.d, c.e};
    const LinearRef ref = linear_reference(s, causal, nullptr, k::kDefaultLinearAttentionEps,
                                           phi_rows(c.map, q, c.d), phi_rows(c.map, kk, c.d), v, dout);
    EXPECT_LE(relative_error(o.out, ref.out), kTolerance);
    EXPECT_LE(relative_error(o.den, ref.den), kTolerance);
    EXPECT_LE(relative_error(o.dq, phi_rows_backward(c.map, q, c.d, ref.da)), kTolerance);
    EXPECT_LE(relative_error(o.dk, phi_rows_backward(c.map, kk, c.d, ref.db)), kTolerance);
    EXPECT_LE(relative_error(o.dv, ref.dv), kTolerance);
    EXPECT_TRUE(all_finite(o.out) && all_finite(o.den) && all_finite(o.dq) && all_finite(o.dk) &&
                all_finite(o.dv));
  }
}

TEST(LinearAttention, UnwantedGradientsAreSkippedAndOthersUnchanged) {
  const Case c{"partial", 1, 2, 100, 100, 32, 48, true, false, FeatureMap::elu1, 32};
  const Floats q = normal_floats(c.batch * c.heads * c.n_q * c.d, 41);
  const Floats kk = normal_floats(q.size(), 42);
  const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 43);
  const Floats dout = normal_floats(v.size(), 44);
  const Outputs full = run_kernel(c, q, kk, v, dout, {});
  const k::LinearAttentionDims dims = dims_of(c);
  k::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.chunk = c.chunk;
  cfg.feature_map = c.map;
  Floats ws(k::linear_attention_backward_workspace_floats(dims, cfg));
  Floats dv(v.size(), NAN), dq(q.size(), NAN);
  k::linear_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), full.out.data(),
                               full.den.data(), dout.data(), nullptr, nullptr, dv.data(),
                               ws.data(), ws.size());
  EXPECT_EQ(dv, full.dv);
  k::linear_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), full.out.data(),
                               full.den.data(), dout.data(), dq.data(), nullptr, nullptr,
                               ws.data(), ws.size());
  EXPECT_EQ(dq, full.dq);
}

TEST(LinearAttention, SmallWorkspaceRunsOnFewerThreadsWithSameResult) {
  const Case c{"one_thread", 2, 3, 77, 77, 32, 48, true, false, FeatureMap::elu1, 32};
  const Floats q = normal_floats(c.batch * c.heads * c.n_q * c.d, 51);
  const Floats kk = normal_floats(q.size(), 52);
  const Floats v = normal_floats(c.batch * c.heads * c.n_k * c.e, 53);
  const k::LinearAttentionDims dims = dims_of(c);
  k::LinearAttentionConfig cfg;
  cfg.causal = true;
  cfg.chunk = c.chunk;
  const size_t full = k::linear_attention_forward_workspace_floats(dims, cfg);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);  // the workspace of a single thread
  const size_t one = k::linear_attention_forward_workspace_floats(dims, cfg);
  omp_set_num_threads(threads);
  Floats out1(v.size()), out2(v.size()), den(c.batch * c.heads * c.n_q);
  Floats ws(full);
  k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out1.data(), den.data(),
                              ws.data(), ws.size());
  k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out2.data(), den.data(),
                              ws.data(), one);
  EXPECT_EQ(out1, out2);
  EXPECT_THROW(k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out2.data(),
                                           den.data(), ws.data(), one / 2),
               Error);
}

TEST(LinearAttention, BadArgumentsNameTheProblem) {
  k::LinearAttentionDims dims{1, 1, 10, 12, 16, 16};
  k::LinearAttentionConfig cfg;
  cfg.causal = true;
  try {
    k::linear_attention_forward_workspace_floats(dims, cfg);
    FAIL() << "causal with Nq != Nk must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Nq=10 Nk=12"), std::string::npos) << e.what();
  }
  cfg.causal = false;
  cfg.feature_map = FeatureMap::favor;
  EXPECT_THROW(k::linear_attention_forward_workspace_floats(dims, cfg), Error);
}

// ---- recurrent mode ----

TEST(LinearAttentionStep, RecurrentOutputsEqualParallelCausalOutputs) {
  const int64_t B = 2, H = 3, N = 70, d = 32, e = 24;
  const Floats q = normal_floats(B * H * N * d, 61), kk = normal_floats(B * H * N * d, 62);
  const Floats v = normal_floats(B * H * N * e, 63);
  Floats pad = make_padding(B, N, 64);
  pad[B * N - 3] = 1.0f;  // a padded token late in batch 1, which pads everything anyway
  for (FeatureMap map : {FeatureMap::elu1, FeatureMap::exp}) {
    k::LinearAttentionConfig cfg;
    cfg.causal = true;
    cfg.chunk = 16;
    cfg.feature_map = map;
    cfg.key_padding_mask = pad.data();
    const k::LinearAttentionDims dims{B, H, N, N, d, e};
    Floats out(B * H * N * e), den(B * H * N);
    Floats ws(k::linear_attention_forward_workspace_floats(dims, cfg));
    k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out.data(), den.data(),
                                ws.data(), ws.size());

    Floats state(B * H * k::linear_attention_state_floats(d, e), 0.0f);
    Floats qt(B * H * d), kt(B * H * d), vt(B * H * e), step_out(B * H * e), pad_t(B);
    double worst = 0.0, scale = 0.0;
    for (int64_t t = 0; t < N; ++t) {
      for (int64_t bh = 0; bh < B * H; ++bh) {
        std::copy_n(q.data() + (bh * N + t) * d, d, qt.data() + bh * d);
        std::copy_n(kk.data() + (bh * N + t) * d, d, kt.data() + bh * d);
        std::copy_n(v.data() + (bh * N + t) * e, e, vt.data() + bh * e);
      }
      for (int64_t b = 0; b < B; ++b) pad_t[b] = pad[b * N + t];
      k::LinearAttentionConfig step_cfg = cfg;
      step_cfg.key_padding_mask = pad_t.data();
      k::linear_attention_step({B, H, 1, 1, d, e}, step_cfg, qt.data(), kt.data(), vt.data(),
                               state.data(), step_out.data());
      for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t x = 0; x < e; ++x) {
          const double ref = out[(bh * N + t) * e + x];
          worst = std::max(worst, std::abs(step_out[bh * e + x] - ref));
          scale = std::max(scale, std::abs(ref));
        }
    }
    EXPECT_LE(worst / scale, kTolerance) << k::feature_map_name(map);
  }
}

}  // namespace
}  // namespace tarn::attention_test
