// CUDA gated delta rule and its causal convolution (kernels/cuda/delta_rule.cu,
// kernels/cuda/causal_conv.cu) against the CPU kernels of kernels/delta_rule.h and
// kernels/causal_conv.h, f32: the scan with a readout and the state-only scan (the cross-
// attention writer), forward and reverse, with and without the erase (kinds delta and gated),
// checkpoints every 1, 7 or 32 tokens, the backward from d_out or from d_final_state, the
// decoding step, and padded tokens (beta 0, alpha 1). Value widths 40 (a partial second warp of
// columns) and 64 with dk 64 (the backward's 49,920 bytes of shared memory: above the default
// 48 KiB, so the kernel opts in).
//
// Both device algorithms (kernels/cuda_delta_rule.h): the recurrent kernels, and the chunked
// (WY form) ones on the same kinds of cases plus checkpoints' chunks of two sub-chunks.
//
// Tolerance: the recurrence written once in Bounded arithmetic (tests/cuda/tolerance.h), run for
// the device's rounding and the CPU's; every dot product and every sum over columns is a Sum
// (any order), so the bound holds for the kernels' orders, whatever they are. The chunked
// kernels' bound is their own algebra written the same way (Chunked). Each element of got may
// differ from want by the two sides' bounds.
//
// Thread orders: every test runs under the three emulated orders (and on a GPU when there is
// one). The backward's two barriers a token are load-bearing: without the first the column sums
// read partials not yet written, without the second a fast thread overwrites them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/causal_conv.h"
#include "kernels/cuda_delta_rule.h"
#include "kernels/delta_rule.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

namespace cpu = kernels::cpu;

struct Case {
  int64_t slices, n, dk, dv, chunk;
  bool reverse, erase, readout;
};

constexpr kernels::DeltaRuleAlgorithm kChunked = kernels::DeltaRuleAlgorithm::chunked;

std::string Describe(const Case& c) {
  std::ostringstream os;
  os << "slices=" << c.slices << " n=" << c.n << " dk=" << c.dk << " dv=" << c.dv << " chunk=" << c.chunk
     << (c.reverse ? " reverse" : "") << (c.erase ? " delta" : " gated") << (c.readout ? " readout" : " state only");
  return os.str();
}

struct Inputs {
  std::vector<float> q, k, v, beta, alpha;
};

// Unit rows of width d.
std::vector<float> UnitRows(int64_t rows, int64_t d, uint32_t seed) {
  std::vector<float> x = Random(static_cast<size_t>(rows * d), -1.0f, 1.0f, seed);
  for (int64_t r = 0; r < rows; ++r) {
    double norm = 0;
    for (int64_t i = 0; i < d; ++i) norm += double(x[r * d + i]) * x[r * d + i];
    for (int64_t i = 0; i < d; ++i) x[r * d + i] = static_cast<float>(x[r * d + i] / std::sqrt(norm));
  }
  return x;
}

// Every fifth token padded (beta 0, alpha 1: a no-op), the others with beta in (0, 1) and
// alpha in [0.6, 1].
Inputs MakeInputs(const Case& c, uint32_t seed) {
  const int64_t rows = c.slices * c.n;
  Inputs in{UnitRows(rows, c.dk, seed), UnitRows(rows, c.dk, seed + 1),
            Random(static_cast<size_t>(rows * c.dv), -1.0f, 1.0f, seed + 2),
            Random(static_cast<size_t>(rows), 0.05f, 0.95f, seed + 3), Random(static_cast<size_t>(rows), 0.6f, 1.0f, seed + 4)};
  for (int64_t r = 0; r < rows; r += 5) in.beta[r] = 0.0f, in.alpha[r] = 1.0f;
  return in;
}

std::vector<Bounded> Exactly(const Rounding& r, const std::vector<float>& x, size_t at, size_t n) {
  std::vector<Bounded> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = Exact(r, x[at + i]);
  return out;
}

// The recurrence of kernels/delta_rule.h for one side's rounding: outputs, final states,
// checkpoints and (given d_out or d_final_state) every gradient, as exact values with bounds.
// The sides differ in one formula: the device sums dq_t = S_t dout_t, the CPU (cpu_dq) its
// equal alpha_t (S_{t-1} dout_t) + k_t (w_t . dout_t).
struct Reference {
  std::vector<Bounded> out, final_state, checkpoints, dq, dk, dv, d_beta, d_alpha;
};

Reference Recurrence(const Rounding& r, const Case& c, const Inputs& in, const std::vector<float>& d_out,
                     const std::vector<float>& d_final, bool cpu_dq) {
  const int64_t n = c.n, dk = c.dk, dv = c.dv, state = dk * dv;
  const int64_t per_slice = std::max<int64_t>(0, (n + c.chunk - 1) / c.chunk - 1);  // chunk 0 starts from zero
  Reference ref;
  ref.out.assign(static_cast<size_t>(c.slices * n * dv), Exact(r, 0));
  ref.final_state.assign(static_cast<size_t>(c.slices * state), Exact(r, 0));
  ref.checkpoints.assign(static_cast<size_t>(c.slices * per_slice * state), Exact(r, 0));
  ref.dq.assign(static_cast<size_t>(c.slices * n * dk), Exact(r, 0));
  ref.dk = ref.dq;
  ref.dv.assign(static_cast<size_t>(c.slices * n * dv), Exact(r, 0));
  ref.d_beta.assign(static_cast<size_t>(c.slices * n), Exact(r, 0));
  ref.d_alpha = ref.d_beta;
  for (int64_t b = 0; b < c.slices; ++b) {
    // Forward, keeping every state: states[t] is S before token t (in scan order).
    std::vector<std::vector<Bounded>> states(static_cast<size_t>(n + 1));
    states[0].assign(static_cast<size_t>(state), Exact(r, 0));
    std::vector<int64_t> rows(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = b * n + (c.reverse ? n - 1 - t : t);
      rows[t] = row;
      if (t > 0 && t % c.chunk == 0)
        std::copy(states[t].begin(), states[t].end(),
                  ref.checkpoints.begin() + (b * per_slice + t / c.chunk - 1) * state);
      const std::vector<Bounded>& s = states[t];
      std::vector<Bounded>& next = states[t + 1];
      next = s;
      const Bounded bt = Exact(r, in.beta[row]), at = Exact(r, in.alpha[row]);
      for (int64_t j = 0; j < dv; ++j) {
        Bounded w = bt * Exact(r, in.v[row * dv + j]);
        if (c.erase) {
          std::vector<Bounded> terms;
          for (int64_t i = 0; i < dk; ++i) terms.push_back(s[i * dv + j] * Exact(r, in.k[row * dk + i]));
          w = bt * (Exact(r, in.v[row * dv + j]) - at * Sum(terms));
        }
        for (int64_t i = 0; i < dk; ++i) next[i * dv + j] = at * s[i * dv + j] + Exact(r, in.k[row * dk + i]) * w;
        if (c.readout) {
          std::vector<Bounded> terms;
          for (int64_t i = 0; i < dk; ++i) terms.push_back(next[i * dv + j] * Exact(r, in.q[row * dk + i]));
          ref.out[row * dv + j] = Sum(terms);
        }
      }
    }
    std::copy(states[n].begin(), states[n].end(), ref.final_state.begin() + b * state);
    if (d_out.empty() && d_final.empty()) continue;
    // Backward, as kernels/cpu/delta_rule.cpp writes it.
    std::vector<Bounded> ds = d_final.empty() ? std::vector<Bounded>(static_cast<size_t>(state), Exact(r, 0))
                                              : Exactly(r, d_final, static_cast<size_t>(b * state), static_cast<size_t>(state));
    for (int64_t t = n - 1; t >= 0; --t) {
      const int64_t row = rows[t];
      const std::vector<Bounded>& prev = states[t];
      const std::vector<Bounded>& cur = states[t + 1];
      const Bounded bt = Exact(r, in.beta[row]), at = Exact(r, in.alpha[row]);
      std::vector<Bounded> w(dv), du(dv), beta_terms, alpha_terms;
      if (c.readout) {
        std::vector<Bounded> wd_terms;  // w . dout (the CPU's dq), w as computed below
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> u_terms;
          for (int64_t i = 0; i < dk; ++i) u_terms.push_back(prev[i * dv + j] * Exact(r, in.k[row * dk + i]));
          const Bounded u = c.erase ? Sum(u_terms) : Exact(r, 0);
          wd_terms.push_back(bt * (Exact(r, in.v[row * dv + j]) - at * u) * Exact(r, d_out[row * dv + j]));
        }
        const Bounded wd = Sum(wd_terms);
        for (int64_t i = 0; i < dk; ++i) {
          std::vector<Bounded> terms;
          for (int64_t j = 0; j < dv; ++j)
            terms.push_back((cpu_dq ? prev : cur)[i * dv + j] * Exact(r, d_out[row * dv + j]));
          ref.dq[row * dk + i] = cpu_dq ? at * Sum(terms) + Exact(r, in.k[row * dk + i]) * wd : Sum(terms);
          for (int64_t j = 0; j < dv; ++j)
            ds[i * dv + j] = ds[i * dv + j] + Exact(r, in.q[row * dk + i]) * Exact(r, d_out[row * dv + j]);
        }
      }
      for (int64_t j = 0; j < dv; ++j) {
        std::vector<Bounded> u_terms, dw_terms;
        for (int64_t i = 0; i < dk; ++i) {
          u_terms.push_back(prev[i * dv + j] * Exact(r, in.k[row * dk + i]));
          dw_terms.push_back(ds[i * dv + j] * Exact(r, in.k[row * dk + i]));
        }
        const Bounded u = c.erase ? Sum(u_terms) : Exact(r, 0), dw = Sum(dw_terms);
        const Bounded rj = Exact(r, in.v[row * dv + j]) - at * u;
        w[j] = bt * rj;
        du[j] = c.erase ? -(at * bt * dw) : Exact(r, 0);
        ref.dv[row * dv + j] = bt * dw;
        beta_terms.push_back(dw * rj);
        alpha_terms.push_back(-(bt * dw * u));
      }
      for (int64_t i = 0; i < dk; ++i) {
        std::vector<Bounded> k_terms;
        for (int64_t j = 0; j < dv; ++j) {
          k_terms.push_back(ds[i * dv + j] * w[j]);
          k_terms.push_back(prev[i * dv + j] * du[j]);
          alpha_terms.push_back(ds[i * dv + j] * prev[i * dv + j]);
        }
        ref.dk[row * dk + i] = Sum(k_terms);
        for (int64_t j = 0; j < dv; ++j)
          ds[i * dv + j] = at * ds[i * dv + j] + Exact(r, in.k[row * dk + i]) * du[j];
      }
      ref.d_beta[row] = Sum(beta_terms);
      ref.d_alpha[row] = Sum(alpha_terms);
    }
  }
  return ref;
}

// The chunked kernels' algebra (kernels/cuda/delta_rule_chunked.cu) for one side's rounding,
// every product and sum formed as the kernels form them (a dot product or a sum over terms as a
// Sum: any order; the substitutions' running subtractions one by one), in sub-chunks of `sub`
// tokens inside each checkpoint's chunk. The exact values are the recurrence's (the same
// function); the bounds are this algorithm's.
Reference Chunked(const Rounding& r, const Case& c, int64_t sub, const Inputs& in, const std::vector<float>& d_out,
                  const std::vector<float>& d_final) {
  const int64_t n = c.n, dk = c.dk, dv = c.dv, state = dk * dv;
  const int64_t per_slice = std::max<int64_t>(0, (n + c.chunk - 1) / c.chunk - 1);
  const Bounded zero = Exact(r, 0);
  Reference ref;
  ref.out.assign(static_cast<size_t>(c.slices * n * dv), zero);
  ref.final_state.assign(static_cast<size_t>(c.slices * state), zero);
  ref.checkpoints.assign(static_cast<size_t>(c.slices * per_slice * state), zero);
  ref.dq.assign(static_cast<size_t>(c.slices * n * dk), zero);
  ref.dk = ref.dq;
  ref.dv.assign(static_cast<size_t>(c.slices * n * dv), zero);
  ref.d_beta.assign(static_cast<size_t>(c.slices * n), zero);
  ref.d_alpha = ref.d_beta;
  const bool backward = !d_out.empty() || !d_final.empty();
  for (int64_t b = 0; b < c.slices; ++b) {
    auto row = [&](int64_t t) { return b * n + (c.reverse ? n - 1 - t : t); };
    // A sub-chunk's quantities, as the kernels compute them from its starting state S0.
    struct Sub {
      int64_t u0, L;
      std::vector<Bounded> s0, d, kk, a, qk, x, ks0, qs0, r, w;  // d: (L, L + 1), column s + 1
    };
    auto K = [&](int64_t t, int64_t i) { return Exact(r, in.k[row(t) * dk + i]); };
    auto Q = [&](int64_t t, int64_t i) { return Exact(r, in.q[row(t) * dk + i]); };
    auto compute = [&](int64_t u0, int64_t L, const std::vector<Bounded>& s0) {
      Sub u{u0, L, s0, {}, {}, {}, {}, {}, {}, {}, {}, {}};
      auto D = [&](int64_t t, int64_t s) -> Bounded& { return u.d[t * (L + 1) + s + 1]; };
      u.d.assign(static_cast<size_t>(L * (L + 1)), zero);
      for (int64_t t = 0; t < L; ++t) {
        Bounded p = Exact(r, 1);
        D(t, t) = p;
        for (int64_t s = t - 1; s >= -1; --s) D(t, s) = p = p * Exact(r, in.alpha[row(u0 + s + 1)]);
      }
      u.kk.assign(static_cast<size_t>(L * L), zero);
      u.a = u.qk = u.x = u.kk;
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s < L; ++s) {
          const Bounded bt = Exact(r, in.beta[row(u0 + t)]);
          if (c.erase && s < t) {
            std::vector<Bounded> terms;
            for (int64_t i = 0; i < dk; ++i) terms.push_back(K(u0 + t, i) * K(u0 + s, i));
            u.kk[t * L + s] = Sum(terms);
            u.a[t * L + s] = bt * D(t, s) * u.kk[t * L + s];
          }
          if (c.readout && s <= t) {
            std::vector<Bounded> terms;
            for (int64_t i = 0; i < dk; ++i) terms.push_back(Q(u0 + t, i) * K(u0 + s, i));
            u.qk[t * L + s] = Sum(terms);
          }
        }
      u.ks0.assign(static_cast<size_t>(L * dv), zero);
      u.qs0 = u.r = u.w = u.ks0;
      for (int64_t t = 0; t < L; ++t)
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> kt, qt;
          for (int64_t i = 0; i < dk; ++i) {
            kt.push_back(K(u0 + t, i) * s0[i * dv + j]);
            if (c.readout) qt.push_back(Q(u0 + t, i) * s0[i * dv + j]);
          }
          u.ks0[t * dv + j] = Sum(kt);
          if (c.readout) u.qs0[t * dv + j] = Sum(qt);
          const Bounded v = Exact(r, in.v[row(u0 + t) * dv + j]);
          u.r[t * dv + j] = c.erase ? v - D(t, -1) * u.ks0[t * dv + j] : v;
        }
      for (int64_t col = 0; col < L; ++col)
        for (int64_t t = col; t < L; ++t) {
          Bounded x = t == col ? Exact(r, in.beta[row(u0 + t)]) : zero;
          if (c.erase)
            for (int64_t s = col; s < t; ++s) x = x - u.a[t * L + s] * u.x[s * L + col];
          u.x[t * L + col] = x;
        }
      for (int64_t t = 0; t < L; ++t)
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> terms;
          for (int64_t s = 0; s <= t; ++s) terms.push_back(u.x[t * L + s] * u.r[s * dv + j]);
          u.w[t * dv + j] = Sum(terms);
        }
      return u;
    };
    auto Dof = [](const Sub& u, int64_t t, int64_t s) { return u.d[t * (u.L + 1) + s + 1]; };
    auto advance = [&](const Sub& u) {
      std::vector<Bounded> next(static_cast<size_t>(state));
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> terms;
          for (int64_t s = 0; s < u.L; ++s) terms.push_back(Dof(u, u.L - 1, s) * K(u.u0 + s, i) * u.w[s * dv + j]);
          next[i * dv + j] = Dof(u, u.L - 1, -1) * u.s0[i * dv + j] + Sum(terms);
        }
      return next;
    };
    // Forward, keeping every sub-chunk.
    std::vector<Sub> subs;
    std::vector<Bounded> s(static_cast<size_t>(state), zero);
    for (int64_t t0 = 0; t0 < n; t0 += c.chunk) {
      if (t0 > 0) std::copy(s.begin(), s.end(), ref.checkpoints.begin() + (b * per_slice + t0 / c.chunk - 1) * state);
      const int64_t t1 = std::min(n, t0 + c.chunk);
      for (int64_t u0 = t0; u0 < t1; u0 += sub) {
        subs.push_back(compute(u0, std::min(sub, t1 - u0), s));
        const Sub& u = subs.back();
        if (c.readout)
          for (int64_t t = 0; t < u.L; ++t)
            for (int64_t j = 0; j < dv; ++j) {
              std::vector<Bounded> terms{Dof(u, t, -1) * u.qs0[t * dv + j]};
              for (int64_t p = 0; p <= t; ++p) terms.push_back(Dof(u, t, p) * u.qk[t * u.L + p] * u.w[p * dv + j]);
              ref.out[row(u.u0 + t) * dv + j] = Sum(terms);
            }
        s = advance(u);
      }
    }
    std::copy(s.begin(), s.end(), ref.final_state.begin() + b * state);
    if (!backward) continue;
    // Backward, sub-chunk by sub-chunk from the last.
    std::vector<Bounded> ds =
        d_final.empty() ? std::vector<Bounded>(static_cast<size_t>(state), zero)
                        : Exactly(r, d_final, static_cast<size_t>(b * state), static_cast<size_t>(state));
    for (auto it = subs.rbegin(); it != subs.rend(); ++it) {
      const Sub& u = *it;
      const int64_t L = u.L, u0 = u.u0;
      auto D = [&](int64_t t, int64_t s2) { return Dof(u, t, s2); };
      auto dO = [&](int64_t t, int64_t j) { return Exact(r, d_out[row(u0 + t) * dv + j]); };
      auto beta = [&](int64_t t) { return Exact(r, in.beta[row(u0 + t)]); };
      std::vector<Bounded> dy(static_cast<size_t>(L * dv)), kdsw(static_cast<size_t>(L * dv));
      for (int64_t p = 0; p < L; ++p)
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> kt;
          for (int64_t i = 0; i < dk; ++i) kt.push_back(K(u0 + p, i) * ds[i * dv + j]);
          const Bounded kds = Sum(kt);
          std::vector<Bounded> terms{D(L - 1, p) * kds};
          if (c.readout)
            for (int64_t t = p; t < L; ++t) terms.push_back(D(t, p) * u.qk[t * L + p] * dO(t, j));
          dy[p * dv + j] = Sum(terms);
          kdsw[p * dv + j] = kds * u.w[p * dv + j];
        }
      if (c.erase)
        for (int64_t j = 0; j < dv; ++j)
          for (int64_t t = L - 1; t >= 0; --t) {
            Bounded y = dy[t * dv + j];
            for (int64_t p = t + 1; p < L; ++p) y = y - u.a[p * L + t] * dy[p * dv + j];
            dy[t * dv + j] = y;
          }
      std::vector<Bounded> da(static_cast<size_t>(L * L), zero), dkk = da, dqk = da;
      std::vector<Bounded> g(static_cast<size_t>(L * (L + 1)), zero);
      auto G = [&](int64_t t, int64_t s2) -> Bounded& { return g[t * (L + 1) + s2 + 1]; };
      for (int64_t t = 0; t < L; ++t)
        for (int64_t p = 0; p < L; ++p) {
          std::vector<Bounded> gterms;
          if (c.erase && p < t) {
            std::vector<Bounded> terms;
            for (int64_t j = 0; j < dv; ++j) terms.push_back(dy[t * dv + j] * u.w[p * dv + j]);
            da[t * L + p] = -Sum(terms);
            dkk[t * L + p] = da[t * L + p] * beta(t) * D(t, p);
            gterms.push_back(da[t * L + p] * beta(t) * u.kk[t * L + p]);
          }
          if (c.readout && p <= t) {
            std::vector<Bounded> terms;
            for (int64_t j = 0; j < dv; ++j) terms.push_back(dO(t, j) * u.w[p * dv + j]);
            const Bounded dp = Sum(terms);
            dqk[t * L + p] = dp * D(t, p);
            if (p < t) gterms.push_back(dp * u.qk[t * L + p]);
          }
          if (!gterms.empty()) G(t, p) = Sum(gterms);
        }
      for (int64_t t = 0; t < L; ++t) {
        const int64_t rw = row(u0 + t);
        for (int64_t i = 0; i < dk; ++i) {
          if (c.readout) {
            std::vector<Bounded> so;
            for (int64_t j = 0; j < dv; ++j) so.push_back(dO(t, j) * u.s0[i * dv + j]);
            std::vector<Bounded> terms{D(t, -1) * Sum(so)};
            for (int64_t p = 0; p <= t; ++p) terms.push_back(dqk[t * L + p] * K(u0 + p, i));
            ref.dq[rw * dk + i] = Sum(terms);
          }
          std::vector<Bounded> wd;
          for (int64_t j = 0; j < dv; ++j) wd.push_back(u.w[t * dv + j] * ds[i * dv + j]);
          std::vector<Bounded> terms{D(L - 1, t) * Sum(wd)};
          if (c.readout)
            for (int64_t p = t; p < L; ++p) terms.push_back(dqk[p * L + t] * Q(u0 + p, i));
          if (c.erase) {
            for (int64_t p = 0; p < L; ++p) terms.push_back((dkk[p * L + t] + dkk[t * L + p]) * K(u0 + p, i));
            std::vector<Bounded> ys;
            for (int64_t j = 0; j < dv; ++j) ys.push_back(dy[t * dv + j] * u.s0[i * dv + j]);
            terms.push_back(-(D(t, -1) * beta(t) * Sum(ys)));
          }
          ref.dk[rw * dk + i] = Sum(terms);
        }
        for (int64_t j = 0; j < dv; ++j) ref.dv[rw * dv + j] = beta(t) * dy[t * dv + j];
        std::vector<Bounded> bterms, qd, kd, de;
        for (int64_t j = 0; j < dv; ++j) {
          bterms.push_back(u.r[t * dv + j] * dy[t * dv + j]);
          if (c.readout) qd.push_back(u.qs0[t * dv + j] * dO(t, j));
          if (c.erase) kd.push_back(u.ks0[t * dv + j] * dy[t * dv + j]);
          de.push_back(kdsw[t * dv + j]);
        }
        if (c.erase)
          for (int64_t p = 0; p < t; ++p) bterms.push_back(da[t * L + p] * D(t, p) * u.kk[t * L + p]);
        ref.d_beta[rw] = Sum(bterms);
        std::vector<Bounded> db{zero};
        if (c.readout) db.push_back(Sum(qd));
        if (c.erase) db.push_back(-(beta(t) * Sum(kd)));
        G(t, -1) = Sum(db);
        if (t < L - 1) G(L - 1, t) = G(L - 1, t) + Sum(de);
      }
      std::vector<Bounded> last;
      for (int64_t e = 0; e < state; ++e) last.push_back(u.s0[e] * ds[e]);
      G(L - 1, -1) = G(L - 1, -1) + Sum(last);
      for (int64_t q = 0; q < L; ++q) {
        std::vector<Bounded> terms;
        for (int64_t t = q; t < L; ++t) {
          Bounded inner = G(t, -1);
          if (q > 0) {
            std::vector<Bounded> it2;
            for (int64_t p = -1; p < q; ++p) it2.push_back(G(t, p) * D(q - 1, p));
            inner = Sum(it2);
          }
          terms.push_back(D(t, q) * inner);
        }
        ref.d_alpha[row(u0 + q)] = Sum(terms);
      }
      std::vector<Bounded> next(static_cast<size_t>(state));
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t j = 0; j < dv; ++j) {
          std::vector<Bounded> terms{D(L - 1, -1) * ds[i * dv + j]};
          for (int64_t t = 0; t < L; ++t) {
            if (c.readout) terms.push_back(D(t, -1) * Q(u0 + t, i) * dO(t, j));
            if (c.erase) terms.push_back(-(D(t, -1) * beta(t) * K(u0 + t, i) * dy[t * dv + j]));
          }
          next[i * dv + j] = Sum(terms);
        }
      ds = next;
    }
  }
  return ref;
}

// The two sides' bounds added.
std::vector<double> Bound(const std::vector<Bounded>& device, const std::vector<Bounded>& host) {
  return Plus(Errors(device), Errors(host));
}

class DeltaRuleConformance : public Conformance {
 protected:
  // The CPU side runs the recurrence, which Recurrence(kCpuF32, ...) bounds.
  void SetUp() override {
    Conformance::SetUp();
    cpu::delta_rule_set_algorithm(kernels::DeltaRuleAlgorithm::recurrent);
  }
  void TearDown() override {
    TARN_ON(target(), delta_rule_set_algorithm, kernels::DeltaRuleAlgorithm::automatic);
    cpu::delta_rule_set_algorithm(kernels::DeltaRuleAlgorithm::automatic);
    Conformance::TearDown();
  }

  // Forward (and with `backward` the backward) of case c on the target against the CPU kernels.
  // algorithm: the device's scans (the CPU always runs the recurrence).
  void Check(const Case& c, bool backward,
             kernels::DeltaRuleAlgorithm algorithm = kernels::DeltaRuleAlgorithm::recurrent) {
    const bool chunked = algorithm == kernels::DeltaRuleAlgorithm::chunked;
    const std::string what = Describe(c) + (chunked ? " chunked" : " recurrent");
    TARN_ON(target(), delta_rule_set_algorithm, algorithm);
    const Inputs in = MakeInputs(c, 11);
    const cpu::DeltaRuleDims dims{c.slices, c.n, c.dk, c.dv};
    const cpu::DeltaRuleConfig cfg{c.reverse, c.chunk, c.erase};
    const size_t rows = static_cast<size_t>(c.slices * c.n), state = static_cast<size_t>(c.slices * c.dk * c.dv);
    const size_t checkpoint_floats = static_cast<size_t>(c.slices * cpu::delta_rule_checkpoints(dims, cfg) * c.dk * c.dv);
    const std::vector<float> d_out = c.readout && backward ? Random(rows * c.dv, -1.0f, 1.0f, 21) : std::vector<float>();
    const std::vector<float> d_final = !c.readout && backward ? Random(state, -1.0f, 1.0f, 22) : std::vector<float>();

    // The CPU's results.
    std::vector<float> out(rows * c.dv), final_state(state), checkpoints(checkpoint_floats);
    cpu::delta_rule_forward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                            in.alpha.data(), c.readout ? out.data() : nullptr, final_state.data(), checkpoints.data());
    // The device's.
    DeviceArray<float> q = dev(in.q), k = dev(in.k), v = dev(in.v), beta = dev(in.beta), alpha = dev(in.alpha);
    DeviceArray<float> g_out = this->out(rows * c.dv), g_final = this->out(state), g_check = this->out(checkpoint_floats);
    TARN_ON(target(), delta_rule_forward, dims, cfg, c.readout ? q.get() : nullptr, k.get(), v.get(), beta.get(),
            alpha.get(), c.readout ? g_out.get() : nullptr, g_final.get(), g_check.get());

    const Reference on_device =
        chunked ? Chunked(kCudaF32, c, TARN_ON(target(), delta_rule_sub_chunk, dims, cfg), in, d_out, d_final)
                : Recurrence(kCudaF32, c, in, d_out, d_final, false);
    const Reference on_cpu = Recurrence(kCpuF32, c, in, d_out, d_final, true);
    if (c.readout) {
      EXPECT_TRUE(WithinBound(g_out.host(), out, Bound(on_device.out, on_cpu.out))) << what << ": out";
    }
    EXPECT_TRUE(WithinBound(g_final.host(), final_state, Bound(on_device.final_state, on_cpu.final_state)))
        << what << ": final state";
    EXPECT_TRUE(WithinBound(g_check.host(), checkpoints, Bound(on_device.checkpoints, on_cpu.checkpoints)))
        << what << ": checkpoints";
    if (!backward) return;

    std::vector<float> dq(rows * c.dk), dk(rows * c.dk), dv(rows * c.dv), d_beta(rows), d_alpha(rows);
    std::vector<float> ws(cpu::delta_rule_backward_workspace_floats(dims, cfg));
    cpu::delta_rule_backward(dims, cfg, c.readout ? in.q.data() : nullptr, in.k.data(), in.v.data(), in.beta.data(),
                             in.alpha.data(), checkpoints.data(), c.readout ? d_out.data() : nullptr,
                             c.readout ? nullptr : d_final.data(), c.readout ? dq.data() : nullptr, dk.data(),
                             dv.data(), d_beta.data(), d_alpha.data(), ws.data(), ws.size());
    const size_t ws_floats = TARN_ON(target(), delta_rule_backward_workspace_floats, dims, cfg);
    DeviceArray<float> g_ws = this->out(ws_floats), g_dq = this->out(rows * c.dk), g_dk = this->out(rows * c.dk),
                       g_dv = this->out(rows * c.dv), g_dbeta = this->out(rows), g_dalpha = this->out(rows);
    DeviceArray<float> g_dout = dev(c.readout ? d_out : std::vector<float>(1)),
                       g_dfinal = dev(c.readout ? std::vector<float>(1) : d_final);
    // The device's backward reads its own checkpoints, as in training.
    TARN_ON(target(), delta_rule_backward, dims, cfg, c.readout ? q.get() : nullptr, k.get(), v.get(), beta.get(),
            alpha.get(), g_check.get(), c.readout ? g_dout.get() : nullptr, c.readout ? nullptr : g_dfinal.get(),
            c.readout ? g_dq.get() : nullptr, g_dk.get(), g_dv.get(), g_dbeta.get(), g_dalpha.get(), g_ws.get(),
            ws_floats);
    if (c.readout) {
      EXPECT_TRUE(WithinBound(g_dq.host(), dq, Bound(on_device.dq, on_cpu.dq))) << what << ": dq";
    }
    EXPECT_TRUE(WithinBound(g_dk.host(), dk, Bound(on_device.dk, on_cpu.dk))) << what << ": dk";
    EXPECT_TRUE(WithinBound(g_dv.host(), dv, Bound(on_device.dv, on_cpu.dv))) << what << ": dv";
    EXPECT_TRUE(WithinBound(g_dbeta.host(), d_beta, Bound(on_device.d_beta, on_cpu.d_beta))) << what << ": d_beta";
    EXPECT_TRUE(WithinBound(g_dalpha.host(), d_alpha, Bound(on_device.d_alpha, on_cpu.d_alpha))) << what << ": d_alpha";
  }
};

TEST_P(DeltaRuleConformance, CausalScanWithReadoutForwardAndBackward) {
  for (int64_t n : {1, 33, 70})
    for (int64_t chunk : {1, 7, 32}) Check({3, n, 16, 40, chunk, false, true, true}, true);
}

TEST_P(DeltaRuleConformance, ReverseScanAndGatedKind) {
  Check({2, 45, 16, 40, 8, true, true, true}, true);
  Check({2, 45, 16, 40, 8, false, false, true}, true);
  Check({2, 45, 16, 40, 8, true, false, true}, true);
}

TEST_P(DeltaRuleConformance, StateOnlyScanBackwardFromTheFinalState) {
  Check({3, 37, 16, 40, 7, false, true, false}, true);
  Check({3, 37, 16, 40, 7, false, false, false}, true);
}

TEST_P(DeltaRuleConformance, HeadOf64OptsInToMoreSharedMemory) {
  Check({2, 40, 64, 64, 16, false, true, true}, true);
}

// The chunked kernels (WY form) against the CPU's recurrence, bounded by their own algebra
// (Chunked): sub-chunks of one token up to 32, a partial last one, checkpoints' chunks longer
// than a sub-chunk (64: two sub-chunks a chunk, the backward keeping the second's starting state
// in the workspace), both directions, both kinds, the state-only writer.
TEST_P(DeltaRuleConformance, ChunkedScanWithReadoutForwardAndBackward) {
  for (int64_t n : {1, 33, 70})
    for (int64_t chunk : {1, 7, 32, 64}) Check({3, n, 16, 40, chunk, false, true, true}, true, kChunked);
}

TEST_P(DeltaRuleConformance, ChunkedReverseScanAndGatedKind) {
  Check({2, 45, 16, 40, 8, true, true, true}, true, kChunked);
  Check({2, 45, 16, 40, 8, false, false, true}, true, kChunked);
  Check({2, 70, 16, 40, 64, true, false, true}, true, kChunked);
}

TEST_P(DeltaRuleConformance, ChunkedStateOnlyScanBackwardFromTheFinalState) {
  Check({3, 37, 16, 40, 7, false, true, false}, true, kChunked);
  Check({3, 37, 16, 40, 64, false, false, false}, true, kChunked);
}

TEST_P(DeltaRuleConformance, ChunkedHeadOf64) {
  Check({2, 40, 64, 64, 16, false, true, true}, true, kChunked);
  Check({1, 70, 64, 64, 64, true, true, true}, true, kChunked);
}

// Chunks of 40 tokens: a sub-chunk of 32 and one of 8 each, so kernel 1 recomputes a state
// inside every chunk and the last chunk (35 tokens) leaves a slot empty; dv 48 is three column
// tiles of the in-order passes; dk 32.
TEST_P(DeltaRuleConformance, ChunkedChunksOfAFullAndAPartialSubChunk) {
  Check({2, 75, 32, 48, 40, false, true, true}, true, kChunked);
  Check({2, 75, 32, 48, 40, true, true, false}, true, kChunked);
}

TEST_P(DeltaRuleConformance, ChunkedEmptySequenceWritesZeroStates) {
  Check({2, 0, 16, 40, 32, false, true, false}, false, kChunked);
}

TEST_P(DeltaRuleConformance, EmptySequenceWritesZeroStates) {
  Check({2, 0, 16, 40, 32, false, true, false}, false);
}

TEST_P(DeltaRuleConformance, DecodingStepsEqualTheScan) {
  // Steps token by token from a zero state give the scan's outputs and final state, within the
  // two sides' bounds (the CPU's step is its scan's write and readout).
  const Case c{3, 20, 16, 40, 32, false, true, true};
  for (bool erase : {true, false}) {
    Case ce = c;
    ce.erase = erase;
    const std::string what = Describe(ce);
    const Inputs in = MakeInputs(ce, 5);
    const Reference on_device = Recurrence(kCudaF32, ce, in, {}, {}, false);
    const Reference on_cpu = Recurrence(kCpuF32, ce, in, {}, {}, true);
    std::vector<float> want(static_cast<size_t>(c.slices * c.n * c.dv));
    std::vector<float> cpu_state(static_cast<size_t>(c.slices * c.dk * c.dv), 0.0f);
    DeviceArray<float> state = dev(cpu_state);
    std::vector<float> got(want.size());
    for (int64_t t = 0; t < c.n; ++t) {
      // Token t of every slice, gathered as (slices, dim).
      std::vector<float> q, k, v, beta, alpha;
      for (int64_t b = 0; b < c.slices; ++b) {
        const int64_t row = b * c.n + t;
        q.insert(q.end(), in.q.begin() + row * c.dk, in.q.begin() + (row + 1) * c.dk);
        k.insert(k.end(), in.k.begin() + row * c.dk, in.k.begin() + (row + 1) * c.dk);
        v.insert(v.end(), in.v.begin() + row * c.dv, in.v.begin() + (row + 1) * c.dv);
        beta.push_back(in.beta[row]);
        alpha.push_back(in.alpha[row]);
      }
      std::vector<float> cpu_out(static_cast<size_t>(c.slices * c.dv));
      cpu::delta_rule_step(c.slices, c.dk, c.dv, cpu_state.data(), q.data(), k.data(), v.data(), beta.data(),
                           alpha.data(), cpu_out.data(), erase);
      DeviceArray<float> gq = dev(q), gk = dev(k), gv = dev(v), gb = dev(beta), ga = dev(alpha);
      DeviceArray<float> gout = out(static_cast<size_t>(c.slices * c.dv));
      TARN_ON(target(), delta_rule_step, c.slices, c.dk, c.dv, state.get(), gq.get(), gk.get(), gv.get(), gb.get(),
              ga.get(), gout.get(), erase);
      const std::vector<float> step_out = gout.host();
      for (int64_t b = 0; b < c.slices; ++b)
        for (int64_t j = 0; j < c.dv; ++j) {
          want[(b * c.n + t) * c.dv + j] = cpu_out[b * c.dv + j];
          got[(b * c.n + t) * c.dv + j] = step_out[b * c.dv + j];
        }
    }
    EXPECT_TRUE(WithinBound(got, want, Bound(on_device.out, on_cpu.out))) << what << ": step outputs";
    EXPECT_TRUE(WithinBound(state.host(), cpu_state, Bound(on_device.final_state, on_cpu.final_state)))
        << what << ": step state";
  }
}

// The causal convolution: y, dx and dw against the CPU's, each a sum of at most taps (y, dx) or
// batch * n (dw) products of exact inputs: within gamma of the products' magnitudes, each side.
TEST_P(DeltaRuleConformance, CausalConvolutionForwardAndBackward) {
  for (const cpu::CausalConvDims d : {cpu::CausalConvDims{2, 37, 70, 4}, cpu::CausalConvDims{3, 5, 33, 7},
                                      cpu::CausalConvDims{1, 1, 8, 1}}) {
    std::ostringstream os;
    os << "batch=" << d.batch << " n=" << d.n << " channels=" << d.channels << " taps=" << d.taps;
    const size_t elems = static_cast<size_t>(d.batch * d.n * d.channels), weights = static_cast<size_t>(d.taps * d.channels);
    const std::vector<float> x = Random(elems, -1.0f, 1.0f, 1), w = Random(weights, -1.0f, 1.0f, 2),
                             dy = Random(elems, -1.0f, 1.0f, 3);
    std::vector<float> y(elems), dx(elems), dw(weights);
    cpu::causal_conv_forward(d, x.data(), w.data(), y.data());
    cpu::causal_conv_backward(d, x.data(), w.data(), dy.data(), dx.data(), dw.data());
    DeviceArray<float> gx = dev(x), gw = dev(w), gdy = dev(dy), gy = out(elems), gdx = out(elems), gdw = out(weights);
    TARN_ON(target(), causal_conv_forward, d, gx.get(), gw.get(), gy.get());
    TARN_ON(target(), causal_conv_backward, d, gx.get(), gw.get(), gdy.get(), gdx.get(), gdw.get());
    // Magnitudes: sum of |products| per output.
    std::vector<double> my(elems, 0.0), mdx(elems, 0.0), mdw(weights, 0.0);
    const int64_t c = d.channels;
    for (int64_t r = 0; r < d.batch * d.n; ++r)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < d.taps; ++i) {
          const int64_t t = r % d.n;
          if (i <= t) {
            my[r * c + ch] += std::fabs(double(w[i * c + ch]) * x[(r - i) * c + ch]);
            mdw[i * c + ch] += std::fabs(double(x[(r - i) * c + ch]) * dy[r * c + ch]);
          }
          if (t + i < d.n) mdx[r * c + ch] += std::fabs(double(w[i * c + ch]) * dy[(r + i) * c + ch]);
        }
    const double per_side_taps = Gamma(d.taps, kF32), per_side_rows = Gamma(d.batch * d.n, kF32);
    EXPECT_TRUE(WithinBound(gy.host(), y, Scaled(my, 2 * per_side_taps))) << os.str() << ": y";
    EXPECT_TRUE(WithinBound(gdx.host(), dx, Scaled(mdx, 2 * per_side_taps))) << os.str() << ": dx";
    EXPECT_TRUE(WithinBound(gdw.host(), dw, Scaled(mdw, 2 * per_side_rows))) << os.str() << ": dw";
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, DeltaRuleConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
