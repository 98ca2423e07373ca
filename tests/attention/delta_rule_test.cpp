// The gated delta rule's CPU kernels (kernels/delta_rule.h), both algorithms (the recurrence and
// the chunked WY form), against the recurrence written naively in double, and their backward
// against central differences of that double recurrence.
#include "kernels/delta_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace tarn::kernels::cpu {
namespace {

struct Inputs {
  DeltaRuleDims dims;
  std::vector<float> q, k, v, beta, alpha;
};

// Unit-norm keys and queries, beta in (0, 1), alpha in (0.5, 1], as the layer feeds them; one
// token made a no-op (beta 0, alpha 1), as padding is.
Inputs random_inputs(DeltaRuleDims dims, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), unit(0.05f, 0.95f), decay(0.5f, 1.0f);
  Inputs in{dims, {}, {}, {}, {}, {}};
  const int64_t rows = dims.slices * dims.n;
  auto unit_rows = [&](std::vector<float>& x) {
    x.resize(static_cast<size_t>(rows * dims.dk));
    for (int64_t r = 0; r < rows; ++r) {
      double norm = 0;
      for (int64_t i = 0; i < dims.dk; ++i) norm += std::pow(x[r * dims.dk + i] = u(gen), 2);
      for (int64_t i = 0; i < dims.dk; ++i) x[r * dims.dk + i] /= static_cast<float>(std::sqrt(norm));
    }
  };
  unit_rows(in.q);
  unit_rows(in.k);
  for (int64_t i = 0; i < rows * dims.dv; ++i) in.v.push_back(u(gen));
  for (int64_t i = 0; i < rows; ++i) in.beta.push_back(unit(gen)), in.alpha.push_back(decay(gen));
  if (rows > 2) in.beta[2] = 0.0f, in.alpha[2] = 1.0f;
  return in;
}

// Runs the kernels with `algorithm` until the scope ends (then automatic again).
struct AlgorithmScope {
  explicit AlgorithmScope(DeltaRuleAlgorithm a) { delta_rule_set_algorithm(a); }
  ~AlgorithmScope() { delta_rule_set_algorithm(DeltaRuleAlgorithm::automatic); }
};
// automatic runs a sequence of up to 48 tokens as one chunk whatever cfg.chunk (taking the
// checkpoints' states inside it), forced chunked one chunk of cfg.chunk tokens at a time.
constexpr DeltaRuleAlgorithm kAlgorithms[] = {DeltaRuleAlgorithm::recurrent, DeltaRuleAlgorithm::chunked,
                                              DeltaRuleAlgorithm::automatic};
const char* Name(DeltaRuleAlgorithm a) {
  return a == DeltaRuleAlgorithm::chunked ? "chunked" : a == DeltaRuleAlgorithm::recurrent ? "recurrent" : "automatic";
}

struct Reference {
  std::vector<double> out, state, checkpoints;  // checkpoints: the states before tokens chunk, 2 chunk, ...
};

// The recurrence of kernels/delta_rule.h, literally, in double (erase off: no k k^T term).
Reference reference(const DeltaRuleDims& d, bool reverse, bool erase, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& beta, const std::vector<double>& alpha,
                    int64_t chunk = 1) {
  Reference r{std::vector<double>(static_cast<size_t>(d.slices * d.n * d.dv)),
              std::vector<double>(static_cast<size_t>(d.slices * d.dk * d.dv)), {}};
  for (int64_t b = 0; b < d.slices; ++b) {
    std::vector<double> s(static_cast<size_t>(d.dk * d.dv), 0.0);
    for (int64_t t = 0; t < d.n; ++t) {
      if (t > 0 && t % chunk == 0) r.checkpoints.insert(r.checkpoints.end(), s.begin(), s.end());
      const int64_t row = b * d.n + (reverse ? d.n - 1 - t : t);
      std::vector<double> next(s.size());
      for (int64_t i = 0; i < d.dk; ++i)
        for (int64_t j = 0; j < d.dv; ++j) {
          double decayed = 0;  // ((I - beta k k^T) S)[i][j]
          for (int64_t m = 0; m < d.dk; ++m)
            decayed += ((i == m ? 1.0 : 0.0) - (erase ? beta[row] : 0.0) * k[row * d.dk + i] * k[row * d.dk + m]) *
                       s[m * d.dv + j];
          next[i * d.dv + j] = alpha[row] * decayed + beta[row] * k[row * d.dk + i] * v[row * d.dv + j];
        }
      s = next;
      for (int64_t j = 0; j < d.dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < d.dk; ++i) o += s[i * d.dv + j] * q[row * d.dk + i];
        r.out[row * d.dv + j] = o;
      }
    }
    std::copy(s.begin(), s.end(), r.state.begin() + b * d.dk * d.dv);
  }
  return r;
}

std::vector<double> widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}

struct Case {
  bool readout, reverse;
  int64_t chunk;
  bool erase = true;
};

class DeltaRule : public ::testing::TestWithParam<Case> {};

// Each test runs both algorithms on a small odd shape (the generic loops) and one with dv = 64
// (the recurrence's fixed-width passes, tarn's head size).
TEST_P(DeltaRule, ForwardMatchesTheRecurrenceInDouble) {
  const Case c = GetParam();
  for (const DeltaRuleAlgorithm algorithm : kAlgorithms)
  for (const DeltaRuleDims dims : {DeltaRuleDims{3, 11, 6, 5}, DeltaRuleDims{2, 31, 16, 64}}) {
    SCOPED_TRACE(std::string(Name(algorithm)) + " dv " + std::to_string(dims.dv));
    const AlgorithmScope scope(algorithm);
    const Inputs in = random_inputs(dims, 1);
    const DeltaRuleConfig cfg{c.reverse, c.chunk, c.erase};
    std::vector<float> out(in.v.size()), state(static_cast<size_t>(dims.slices * dims.dk * dims.dv)),
        checkpoints(static_cast<size_t>(dims.slices * delta_rule_checkpoints(dims, cfg) * dims.dk * dims.dv));
    delta_rule_forward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                       in.alpha.data(), c.readout ? out.data() : nullptr, state.data(), checkpoints.data());
    const Reference ref = reference(dims, c.reverse, c.erase, widen(in.q), widen(in.k), widen(in.v), widen(in.beta),
                                    widen(in.alpha), c.chunk);
    EXPECT_LT(max_abs_diff(state, ref.state), 2e-6);
    EXPECT_LT(max_abs_diff(checkpoints, ref.checkpoints), 2e-6);
    if (c.readout) {
      EXPECT_LT(max_abs_diff(out, ref.out), 2e-6);
    }
  }
}

TEST_P(DeltaRule, BackwardMatchesCentralDifferencesOfTheDoubleRecurrence) {
  const Case c = GetParam();
  for (const DeltaRuleAlgorithm algorithm : kAlgorithms)
  for (const DeltaRuleDims dims : {DeltaRuleDims{2, 7, 4, 3}, DeltaRuleDims{1, 6, 8, 64}}) {
    SCOPED_TRACE(std::string(Name(algorithm)) + " dv " + std::to_string(dims.dv));
    const AlgorithmScope scope(algorithm);
    const Inputs in = random_inputs(dims, 2);
    const DeltaRuleConfig cfg{c.reverse, c.chunk, c.erase};
    std::mt19937 gen(3);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> g_out(in.v.size()), g_state(static_cast<size_t>(dims.slices * dims.dk * dims.dv));
    for (double& x : g_out) x = u(gen);
    for (double& x : g_state) x = u(gen);
    // The loss L = <g_out, out> + <g_state, final state>.
    std::vector<std::vector<double>> x = {widen(in.q), widen(in.k), widen(in.v), widen(in.beta), widen(in.alpha)};
    auto loss = [&] {
      const Reference r = reference(dims, c.reverse, c.erase, x[0], x[1], x[2], x[3], x[4]);
      double l = 0;
      if (c.readout)
        for (size_t i = 0; i < r.out.size(); ++i) l += g_out[i] * r.out[i];
      for (size_t i = 0; i < r.state.size(); ++i) l += g_state[i] * r.state[i];
      return l;
    };

    std::vector<float> checkpoints(static_cast<size_t>(dims.slices * delta_rule_checkpoints(dims, cfg) * dims.dk * dims.dv));
    delta_rule_forward(dims, cfg, nullptr, in.k.data(), in.v.data(), in.beta.data(), in.alpha.data(), nullptr,
                       nullptr, checkpoints.data());
    const std::vector<float> d_out(g_out.begin(), g_out.end()), d_state(g_state.begin(), g_state.end());
    std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size()), dbeta(in.beta.size()),
        dalpha(in.alpha.size()), ws(delta_rule_backward_workspace_floats(dims, cfg));
    delta_rule_backward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                        in.alpha.data(), checkpoints.data(), c.readout ? d_out.data() : nullptr, d_state.data(),
                        c.readout ? dq.data() : nullptr, dk.data(), dv.data(), dbeta.data(), dalpha.data(), ws.data(),
                        ws.size());
    const std::vector<std::vector<float>*> got = {&dq, &dk, &dv, &dbeta, &dalpha};
    const char* names[] = {"dq", "dk", "dv", "dbeta", "dalpha"};
    for (size_t which = c.readout ? 0 : 1; which < x.size(); ++which) {
      for (size_t i = 0; i < x[which].size(); ++i) {
        const double h = 1e-6, keep = x[which][i];
        x[which][i] = keep + h;
        const double up = loss();
        x[which][i] = keep - h;
        const double down = loss();
        x[which][i] = keep;
        const double want = (up - down) / (2 * h);
        EXPECT_NEAR((*got[which])[i], want, 2e-5 * (1 + std::fabs(want))) << names[which] << "[" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ReadoutDirectionAndChunk, DeltaRule,
                         ::testing::Values(Case{true, false, 1}, Case{true, false, 3}, Case{true, false, 64},
                                           Case{true, false, 32}, Case{false, false, 5},
                                           Case{true, true, 3}, Case{false, false, 3}, Case{false, true, 4},
                                           Case{true, false, 3, false}, Case{false, true, 2, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.readout ? "Readout" : "StateOnly") +
                                  (info.param.reverse ? "Reverse" : "Forward") + "Chunk" +
                                  std::to_string(info.param.chunk) + (info.param.erase ? "" : "NoErase");
                         });

// The decoding step is the recurrence: it gives the recurrent scan's bits, and the chunked
// scan's rows within f32 rounding.
TEST(DeltaRuleStep, EqualsTheScansRowForEachToken) {
  for (const DeltaRuleAlgorithm algorithm : kAlgorithms)
  for (const DeltaRuleDims dims : {DeltaRuleDims{2, 9, 8, 8}, DeltaRuleDims{2, 9, 16, 64}}) {
    SCOPED_TRACE(std::string(Name(algorithm)) + " dv " + std::to_string(dims.dv));
    const AlgorithmScope scope(algorithm);
    const Inputs in = random_inputs(dims, 4);
    std::vector<float> out(in.v.size());
    delta_rule_forward(dims, {}, in.q.data(), in.k.data(), in.v.data(), in.beta.data(), in.alpha.data(), out.data(),
                       nullptr, nullptr);
    std::vector<float> state(static_cast<size_t>(dims.slices * dims.dk * dims.dv), 0.0f);
    for (int64_t t = 0; t < dims.n; ++t) {
      std::vector<float> q, k, v, beta, alpha, step_out(static_cast<size_t>(dims.slices * dims.dv));
      for (int64_t b = 0; b < dims.slices; ++b) {
        const int64_t row = b * dims.n + t;
        q.insert(q.end(), in.q.begin() + row * dims.dk, in.q.begin() + (row + 1) * dims.dk);
        k.insert(k.end(), in.k.begin() + row * dims.dk, in.k.begin() + (row + 1) * dims.dk);
        v.insert(v.end(), in.v.begin() + row * dims.dv, in.v.begin() + (row + 1) * dims.dv);
        beta.push_back(in.beta[row]);
        alpha.push_back(in.alpha[row]);
      }
      delta_rule_step(dims.slices, dims.dk, dims.dv, state.data(), q.data(), k.data(), v.data(), beta.data(),
                      alpha.data(), step_out.data());
      for (int64_t b = 0; b < dims.slices; ++b)
        for (int64_t j = 0; j < dims.dv; ++j) {
          const float scan = out[(b * dims.n + t) * dims.dv + j];
          if (algorithm == DeltaRuleAlgorithm::recurrent)
            EXPECT_EQ(step_out[b * dims.dv + j], scan) << "token " << t;
          else
            EXPECT_NEAR(step_out[b * dims.dv + j], scan, 2e-6) << "token " << t;
        }
    }
  }
}

TEST(DeltaRuleMemory, CheckpointsAndWorkspaceGrowLinearlyWithTokens) {
  const DeltaRuleConfig cfg{false, 32};
  const DeltaRuleDims short_seq{4, 1024, 64, 64}, long_seq{4, 4096, 64, 64};
  // ceil(n / chunk) - 1: the first chunk starts from zero.
  EXPECT_EQ(delta_rule_checkpoints(short_seq, cfg), 31);
  EXPECT_EQ(delta_rule_checkpoints(long_seq, cfg), 127);
  EXPECT_EQ(delta_rule_checkpoints({4, 32, 64, 64}, cfg), 0);
  EXPECT_EQ(delta_rule_checkpoints({4, 33, 64, 64}, cfg), 1);
  EXPECT_EQ(delta_rule_backward_workspace_floats(long_seq, cfg), delta_rule_backward_workspace_floats(short_seq, cfg));
}

}  // namespace
}  // namespace tarn::kernels::cpu
