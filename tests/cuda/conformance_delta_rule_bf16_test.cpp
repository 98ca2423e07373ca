// bf16 gated delta rule (kernels/cuda/delta_rule_chunked_bf16.cu) against the CPU f32 kernels of
// kernels/delta_rule.h (the recurrence) run on the same bf16-rounded q, k, v and d_out: the
// forward (out, final state, checkpoints) and the backward (dq, dk, dv, d_beta, d_alpha), with
// and without the erase (kinds delta and gated), with a readout and state-only (the
// cross-attention writer), forward and reverse scans; n of 1, not a multiple of the sub-chunk, and
// chunks that end in a partial sub-chunk or leave a slot empty; checkpoint chunks of 7 (one
// padded sub-chunk of 7 tokens in 16 rows), 40 (32 + 8) and 64 (two sub-chunks of 32); dk and dv
// that are not multiples of 16 (padded tiles) and dv over several column tiles; d_out and
// d_final_state together. Every test runs under the three emulated thread orders (and on a GPU
// where there is one), and the results are the same bits in each order and on a second run.
//
// Tolerance, derived as the linear-attention bf16 tests derive theirs
// (tests/cuda/conformance_linear_attention_bf16_test.cpp): the reference sees exactly the
// kernel's inputs, so what differs is the kernel's own rounding of its tensor-core operands to
// bf16 (the state, R, X, W, P, dY, dP, dA, the scaled d_out and dY: 2^-8 relative each at
// worst) and of its bf16 outputs. How much such roundings move each output is measured: the CPU
// op is rerun on q, k, v, beta, d_out and d_final_state jittered by a relative 2^-8 (4 draws, the
// farthest kept), and each element must lie within
//   1e-2 |want| + 1e-2 rms(want) + 3 max |jittered - want|
// (rms and max over the whole tensor). alpha is not jittered: the kernel keeps it and every decay
// product in f32. The errors stay below 0.25 of that bound on every case here, while a kernel
// that drops a term or mis-indexes a tile is off by the output's own size: each of these,
// broken on purpose, failed the suite in all three orders: diag(e) W dS^T dropped from dk, the
// mirror dKK^T dropped, the A operand's transposed tile read at the untransposed offset, the
// barrier between the forward substitution and W = X R removed, R's -diag(b) K S0 dropped, the
// back substitution's last row skipped, Q^T diag(b) dout dropped from the state gradients, and
// the barrier before kernel 3's dY W^T and dout W^T removed. Since the factors kernel and the
// state pass (2026-12-02), these failed too: the state pass's W = U - Khat S0 taken as U, and
// the state gradients' dY = T^T dW taken as T dW.
// On a GPU the bf16 roundings are the same; its f32 tensor-core sums (truncating, another order)
// add at most gamma_{C+d}(2^-23) < 1e-4 of the terms' magnitudes, inside the slack.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda_delta_rule_bf16.h"
#include "kernels/delta_rule.h"
#include "kernels/emu/bf16.h"
#include "kernels/emu/emu.h"
#include "tests/cuda/conformance_bf16_util.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

struct Case {
  int64_t slices, n, dk, dv, chunk;
  bool reverse, erase, readout;
  bool final_gradient;  // d_final_state given (always when there is no readout)
};

std::string Describe(const Case& c) {
  std::ostringstream os;
  os << "slices=" << c.slices << " n=" << c.n << " dk=" << c.dk << " dv=" << c.dv << " chunk=" << c.chunk
     << (c.reverse ? " reverse" : "") << (c.erase ? " delta" : " gated") << (c.readout ? " readout" : " state only")
     << (c.final_gradient ? " d_final_state" : "");
  return os.str();
}

struct Inputs {
  std::vector<float> q, k, v, beta, alpha, d_out, d_final;
};

// Unit rows of width d, rounded to bf16.
std::vector<float> UnitRows(int64_t rows, int64_t d, uint32_t seed) {
  std::vector<float> x = Random(static_cast<size_t>(rows * d), -1.0f, 1.0f, seed);
  for (int64_t r = 0; r < rows; ++r) {
    double norm = 0;
    for (int64_t i = 0; i < d; ++i) norm += double(x[r * d + i]) * x[r * d + i];
    for (int64_t i = 0; i < d; ++i) x[r * d + i] = static_cast<float>(x[r * d + i] / std::sqrt(norm));
  }
  return Rounded(x);
}

// As the f32 conformance test's: every fifth token padded (beta 0, alpha 1), beta in (0, 1),
// alpha in [0.6, 1]; q, k, v, d_out rounded to bf16.
Inputs MakeInputs(const Case& c, uint32_t seed) {
  const int64_t rows = c.slices * c.n;
  Inputs in{UnitRows(rows, c.dk, seed),
            UnitRows(rows, c.dk, seed + 1),
            RoundedRandom(static_cast<size_t>(rows * c.dv), -1.0f, 1.0f, seed + 2),
            Random(static_cast<size_t>(rows), 0.05f, 0.95f, seed + 3),
            Random(static_cast<size_t>(rows), 0.6f, 1.0f, seed + 4),
            {},
            {}};
  for (int64_t r = 0; r < rows; r += 5) in.beta[r] = 0.0f, in.alpha[r] = 1.0f;
  if (c.readout) in.d_out = RoundedRandom(static_cast<size_t>(rows * c.dv), -1.0f, 1.0f, seed + 5);
  if (c.final_gradient || !c.readout)
    in.d_final = Random(static_cast<size_t>(c.slices * c.dk * c.dv), -1.0f, 1.0f, seed + 6);
  return in;
}

struct Results {
  std::vector<float> out, final_state, checkpoints, dq, dk, dv, d_beta, d_alpha;
};

// The CPU's forward and backward in f32; with jitter > 0 on q, k, v, beta, d_out and
// d_final_state each scaled by 1 + jitter u, u uniform in [-1, 1].
Results RunCpu(const Case& c, Inputs in, float jitter, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto shake = [&](std::vector<float>& x) {
    if (jitter > 0.0f)
      for (float& e : x) e *= 1.0f + jitter * u(gen);
  };
  shake(in.q), shake(in.k), shake(in.v), shake(in.beta), shake(in.d_out), shake(in.d_final);
  const cpu::DeltaRuleDims dims{c.slices, c.n, c.dk, c.dv};
  const cpu::DeltaRuleConfig cfg{c.reverse, c.chunk, c.erase};
  const size_t rows = static_cast<size_t>(c.slices * c.n), state = static_cast<size_t>(c.slices * c.dk * c.dv);
  Results r;
  r.out.assign(c.readout ? rows * c.dv : 0, 0.0f);
  r.final_state.assign(state, 0.0f);
  r.checkpoints.assign(static_cast<size_t>(c.slices * cpu::delta_rule_checkpoints(dims, cfg) * c.dk * c.dv), 0.0f);
  cpu::delta_rule_forward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                          in.alpha.data(), c.readout ? r.out.data() : nullptr, r.final_state.data(),
                          r.checkpoints.data());
  r.dq.assign(c.readout ? rows * c.dk : 0, 0.0f);
  r.dk.assign(rows * c.dk, 0.0f);
  r.dv.assign(rows * c.dv, 0.0f);
  r.d_beta.assign(rows, 0.0f);
  r.d_alpha.assign(rows, 0.0f);
  std::vector<float> ws(cpu::delta_rule_backward_workspace_floats(dims, cfg));
  cpu::delta_rule_backward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                           in.alpha.data(), r.checkpoints.data(), c.readout ? in.d_out.data() : nullptr,
                           in.d_final.empty() ? nullptr : in.d_final.data(), c.readout ? r.dq.data() : nullptr,
                           r.dk.data(), r.dv.data(), r.d_beta.data(), r.d_alpha.data(), ws.data(), ws.size());
  return r;
}

// x[i] = whichever of x[i], y[i] lies farther from want[i].
void KeepFarther(std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& want) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(y[i] - want[i]) > std::fabs(x[i] - want[i])) x[i] = y[i];
}

constexpr float kJitter = 0x1p-8f;  // one rounding to bf16
constexpr uint32_t kJitterDraws = 4;
// The device's results, all as f32 (bf16 outputs widened).
struct DeviceResults {
  std::vector<float> out, final_state, checkpoints, dq, dk, dv, d_beta, d_alpha;
  std::vector<bf16> raw_out, raw_dq, raw_dk, raw_dv;  // for comparing bits
};

// The bf16 kernels' forward on `target`, then their backward from their own checkpoints.
DeviceResults RunDevice(Target target, const Case& c, const Inputs& in) {
  const cpu::DeltaRuleDims dims{c.slices, c.n, c.dk, c.dv};
  const cpu::DeltaRuleConfig cfg{c.reverse, c.chunk, c.erase};
  const size_t rows = static_cast<size_t>(c.slices * c.n), state = static_cast<size_t>(c.slices * c.dk * c.dv);
  const size_t checkpoint_floats = static_cast<size_t>(c.slices * cpu::delta_rule_checkpoints(dims, cfg) * c.dk * c.dv);
  auto out = [target](size_t n) { return DeviceArray<float>(target, n, std::nanf("")); };
  auto out_bf16 = [target](size_t n) { return DeviceArray<bf16>(target, n, kBf16Nan); };
  DeviceArray<bf16> q(target, ToBf16(in.q)), k(target, ToBf16(in.k)), v(target, ToBf16(in.v));
  DeviceArray<float> beta(target, in.beta), alpha(target, in.alpha);
  DeviceArray<bf16> g_out = out_bf16(c.readout ? rows * c.dv : 0);
  DeviceArray<float> g_final = out(state), g_check = out(checkpoint_floats);
  const size_t fws_floats = TARN_ON(target, delta_rule_bf16_forward_workspace_floats, dims, cfg);
  DeviceArray<float> g_fws = out(fws_floats);
  TARN_ON(target, delta_rule_bf16_forward, dims, cfg, c.readout ? q.get() : nullptr, k.get(), v.get(), beta.get(),
          alpha.get(), c.readout ? g_out.get() : nullptr, g_final.get(), g_check.get(), g_fws.get(), fws_floats);
  DeviceResults r;
  r.raw_out = g_out.host();
  r.out = ToFloat(r.raw_out);
  r.final_state = g_final.host();
  r.checkpoints = g_check.host();
  if (c.n == 0) return r;

  const size_t ws_floats = TARN_ON(target, delta_rule_bf16_backward_workspace_floats, dims, cfg);
  DeviceArray<float> g_ws = out(ws_floats), g_dbeta = out(rows), g_dalpha = out(rows);
  DeviceArray<bf16> g_dq = out_bf16(c.readout ? rows * c.dk : 0), g_dk = out_bf16(rows * c.dk),
                    g_dv = out_bf16(rows * c.dv);
  DeviceArray<bf16> g_dout(target, ToBf16(in.d_out));
  DeviceArray<float> g_dfinal(target, in.d_final);
  TARN_ON(target, delta_rule_bf16_backward, dims, cfg, c.readout ? q.get() : nullptr, k.get(), v.get(), beta.get(),
          alpha.get(), g_check.get(), c.readout ? g_dout.get() : nullptr,
          in.d_final.empty() ? nullptr : g_dfinal.get(), c.readout ? g_dq.get() : nullptr, g_dk.get(), g_dv.get(),
          g_dbeta.get(), g_dalpha.get(), g_ws.get(), ws_floats);
  r.raw_dq = g_dq.host(), r.raw_dk = g_dk.host(), r.raw_dv = g_dv.host();
  r.dq = ToFloat(r.raw_dq), r.dk = ToFloat(r.raw_dk), r.dv = ToFloat(r.raw_dv);
  r.d_beta = g_dbeta.host();
  r.d_alpha = g_dalpha.host();
  return r;
}

bool SameBits(const DeviceResults& a, const DeviceResults& b) {
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
  };
  return same(a.raw_out, b.raw_out) && same(a.final_state, b.final_state) && same(a.checkpoints, b.checkpoints) &&
         same(a.raw_dq, b.raw_dq) && same(a.raw_dk, b.raw_dk) && same(a.raw_dv, b.raw_dv) &&
         same(a.d_beta, b.d_beta) && same(a.d_alpha, b.d_alpha);
}

class DeltaRuleBf16Conformance : public Conformance {
 protected:
  void SetUp() override {
    Conformance::SetUp();
    cpu::delta_rule_set_algorithm(kernels::DeltaRuleAlgorithm::recurrent);
  }
  void TearDown() override {
    cpu::delta_rule_set_algorithm(kernels::DeltaRuleAlgorithm::automatic);
    Conformance::TearDown();
  }

  void Check(const Case& c, uint32_t seed = 11) {
    const std::string what = Describe(c);
    const Inputs in = MakeInputs(c, seed);
    const Results want = RunCpu(c, in, 0.0f, 0);
    Results jit = RunCpu(c, in, kJitter, seed + 100);
    for (uint32_t draw = 1; draw < kJitterDraws; ++draw) {
      const Results more = RunCpu(c, in, kJitter, seed + 100 + 1000 * draw);
      KeepFarther(jit.out, more.out, want.out);
      KeepFarther(jit.final_state, more.final_state, want.final_state);
      KeepFarther(jit.checkpoints, more.checkpoints, want.checkpoints);
      KeepFarther(jit.dq, more.dq, want.dq);
      KeepFarther(jit.dk, more.dk, want.dk);
      KeepFarther(jit.dv, more.dv, want.dv);
      KeepFarther(jit.d_beta, more.d_beta, want.d_beta);
      KeepFarther(jit.d_alpha, more.d_alpha, want.d_alpha);
    }
    const DeviceResults got = RunDevice(target(), c, in);
    if (c.readout) {
      EXPECT_TRUE(Bf16Close(got.out, want.out, jit.out)) << what << ": out";
    }
    EXPECT_TRUE(Bf16Close(got.final_state, want.final_state, jit.final_state)) << what << ": final state";
    EXPECT_TRUE(Bf16Close(got.checkpoints, want.checkpoints, jit.checkpoints)) << what << ": checkpoints";
    if (c.readout) {
      EXPECT_TRUE(Bf16Close(got.dq, want.dq, jit.dq)) << what << ": dq";
    }
    EXPECT_TRUE(Bf16Close(got.dk, want.dk, jit.dk)) << what << ": dk";
    EXPECT_TRUE(Bf16Close(got.dv, want.dv, jit.dv)) << what << ": dv";
    EXPECT_TRUE(Bf16Close(got.d_beta, want.d_beta, jit.d_beta)) << what << ": d_beta";
    EXPECT_TRUE(Bf16Close(got.d_alpha, want.d_alpha, jit.d_alpha)) << what << ": d_alpha";

    // A second run gives the same bits.
    const DeviceResults again = RunDevice(target(), c, in);
    EXPECT_TRUE(SameBits(got, again)) << what << ": a second run differs";
  }
};

// Delta (erase) and gated kinds with a readout; chunk 64 is two sub-chunks of 32, the second
// partial at n = 45; dv = 40 is three column tiles of the in-order passes, the last 8 wide.
TEST_P(DeltaRuleBf16Conformance, CausalScanWithReadout) {
  for (bool erase : {true, false}) {
    Check({2, 45, 16, 40, 64, false, erase, true, false});
    Check({2, 1, 16, 40, 64, false, erase, true, false});  // row 0 padded, row 1 not
  }
}

// Checkpoints every 7 tokens (sub-chunks of 7 padded to 16 rows) and every 40 (a sub-chunk of 32
// and one of 8; the last chunk of 30 tokens leaves its second slot empty), reverse scans,
// dk and dv off the 16 grid, d_out and d_final_state together.
TEST_P(DeltaRuleBf16Conformance, PartialSubChunksAndPaddedTiles) {
  Check({2, 33, 24, 20, 7, false, true, true, true});
  Check({2, 70, 32, 48, 40, true, true, true, false});
  Check({2, 70, 32, 48, 40, false, false, true, true});
}

// The state-only scan (no q, no out), its backward from d_final_state alone.
TEST_P(DeltaRuleBf16Conformance, StateOnlyScanBackwardFromTheFinalState) {
  Check({3, 37, 16, 40, 64, false, true, false, true});
  Check({3, 37, 16, 40, 7, true, false, false, true});
}

// Heads of 64: the largest shared memory (see the header for its size).
TEST_P(DeltaRuleBf16Conformance, HeadOf64) {
  Check({1, 100, 64, 64, 64, false, true, true, true});
  Check({1, 50, 64, 64, 32, true, false, true, false});
}

// Heads of 128: the backward's shared memory fits only 16-token sub-chunks (kernels/
// cuda_delta_rule_bf16.h), so a chunk of 64 runs four of them and the states kernel recomputes
// three states a chunk; the last chunk (n = 70) is a partial sub-chunk of 6.
TEST_P(DeltaRuleBf16Conformance, HeadOf128RunsSubChunksOf16) {
  const cpu::DeltaRuleDims dims{1, 70, 128, 128};
  ASSERT_EQ(TARN_ON(target(), delta_rule_bf16_sub_chunk, dims, cpu::DeltaRuleConfig{false, 64, true}), 16);
  Check({1, 70, 128, 128, 64, false, true, true, true});
}

TEST_P(DeltaRuleBf16Conformance, EmptySequenceWritesZeroStates) {
  const Case c{2, 0, 16, 40, 32, false, true, false, true};
  const Inputs in = MakeInputs(c, 3);
  const DeviceResults got = RunDevice(target(), c, in);
  EXPECT_EQ(got.final_state, std::vector<float>(got.final_state.size(), 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Targets, DeltaRuleBf16Conformance, ::testing::ValuesIn(kAllTargets), TargetName);

// The same bits in every emulated thread order.
TEST(DeltaRuleBf16Determinism, SameBitsInEveryThreadOrder) {
  const emu::ThreadOrder saved = emu::thread_order();
  for (const Case& c :
       {Case{2, 45, 24, 40, 40, false, true, true, true}, Case{2, 45, 24, 40, 40, true, false, false, true}}) {
    const Inputs in = MakeInputs(c, 7);
    std::vector<DeviceResults> runs;
    for (emu::ThreadOrder order : {emu::ThreadOrder::forward, emu::ThreadOrder::reverse, emu::ThreadOrder::random}) {
      emu::set_thread_order(order);
      runs.push_back(RunDevice(Target::emu_forward, c, in));  // an emulator target, in this order
    }
    EXPECT_TRUE(SameBits(runs[0], runs[1])) << Describe(c) << ": forward vs reverse order";
    EXPECT_TRUE(SameBits(runs[0], runs[2])) << Describe(c) << ": forward vs random order";
  }
  emu::set_thread_order(saved);
}

}  // namespace
}  // namespace tarn::cuda_testing
