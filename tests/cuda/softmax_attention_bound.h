#pragma once
// Per-element error bounds of softmax attention (kernels/softmax_attention.h: forward out and
// lse, backward dq, dk, dv from a given out and lse), for the conformance tests of the f32 and
// bf16 CUDA kernels: a first-order worst-case analysis (tests/cuda/tolerance.h) evaluated in
// double on the test's data, for each implementation's rounding, summed over the device and
// the CPU reference. Any summation order, tiling or online rescaling is covered; a wrong mask,
// tile, scale or term is not (it moves outputs by their own size).
//
// The error model, per query i and visible key j (s = scale q.k, S = scale |q|.|k|):
//   score        s_ij within gamma_{d+1} S_ij (a d-term dot product, then the scale)
//   weight       p_ij = exp(s_ij - shift), relative error rho_ij = gamma_{d+1} S_ij
//                + u |s_ij - shift| (the subtraction) + exp (+ the operand rounding where P
//                is rounded for a tensor-core product); an error common to a row's weights (the
//                shift, the online rescale factors) cancels in out, not in lse
//   out          sum_j p v / sum_j p: |d out| <= sum_j p (rho + g) |v| + |out| (sum_j p rho + g),
//                g = gamma_{2 Nk + 2}: the Nk-term sums, one rescale per key at most, 1 / l
//   lse          m + log l: sum_j p rho + g + Nk exp + u (max s - min s) (the rescale factors'
//                own error) + log |log l| + u |lse|
//   backward     p = exp(s - lse) (lse given), dP = dout.v and D = dout.out (gamma_e each),
//                dS = scale p (dP - D) (3 more roundings, then the operand rounding), and
//                dv = P^T dout, dq = dS k, dk = dS^T q: each a sum whose terms carry their own
//                error plus gamma_n of the sum's magnitude
// Outputs stored in a narrower type add store |value|. First order: the bound is scaled by
// 1 + 2 (operand + store) for the products of two bf16 roundings.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <vector>

#include "kernels/softmax_attention.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {

struct SoftmaxAttentionBounds {
  std::vector<double> out, lse, dq, dk, dv;
};

// The bound on |device - CPU| for each output: forward from q, k, v; backward from q, k, v,
// dout and the given out_in, lse_in (what both sides' backward read). pad: (batch, n_k),
// nonzero = padded, or empty. window > 0: sliding-window attention, written out here apart from
// the kernels' helper (causal: i - window < j <= i; bidirectional: |i - j| <= window / 2).
inline SoftmaxAttentionBounds SoftmaxAttentionErrorBounds(const kernels::cpu::SoftmaxAttentionDims& dims,
                                                          bool causal, const std::vector<float>& pad,
                                                          const std::vector<float>& q, const std::vector<float>& k,
                                                          const std::vector<float>& v, const std::vector<float>& dout,
                                                          const std::vector<float>& out_in,
                                                          const std::vector<float>& lse_in,
                                                          const std::vector<Rounding>& sides, int64_t window = 0) {
  // Here Rounding::operand is the rounding of P and dS before the products that take them.
  const int64_t nq = dims.n_q, nk = dims.n_k, d = dims.d, e = dims.e;
  const double scale = 1.0f / std::sqrt(static_cast<float>(d));  // the kernels' float scale
  SoftmaxAttentionBounds b;
  const int64_t bh_count = dims.batch * dims.heads;
  b.out.assign(bh_count * nq * e, 0.0);
  b.lse.assign(bh_count * nq, 0.0);
  b.dq.assign(bh_count * nq * d, 0.0);
  b.dk.assign(bh_count * nk * d, 0.0);
  b.dv.assign(bh_count * nk * e, 0.0);
  double second_order = 0.0;
  for (const Rounding& r : sides) second_order = std::max(second_order, 2 * (r.operand + r.store));

  std::vector<double> s(nq * nk), S(nq * nk), p(nq * nk), pb(nq * nk), dp(nq * nk), mp(nq * nk);
  std::vector<char> seen(nq * nk);
  std::vector<double> out(nq * e), lse(nq), l(nq), range(nq), dvec(nq), mdvec(nq);
  std::vector<double> ds(nq * nk), dq(nq * d), dk(nk * d), dv(nk * e);
  for (int64_t bh = 0; bh < bh_count; ++bh) {
    const float* qb = q.data() + bh * nq * d;
    const float* kb = k.data() + bh * nk * d;
    const float* vb = v.data() + bh * nk * e;
    const float* gb = dout.data() + bh * nq * e;
    const float* ob = out_in.data() + bh * nq * e;
    const float* pad_b = pad.empty() ? nullptr : pad.data() + (bh / dims.heads) * nk;
    // Exact scores, weights and outputs, in double.
    for (int64_t i = 0; i < nq; ++i) {
      double m = -INFINITY, lo = INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        double dot = 0.0, mag = 0.0;
        for (int64_t c = 0; c < d; ++c) {
          dot += static_cast<double>(qb[i * d + c]) * kb[j * d + c];
          mag += std::fabs(static_cast<double>(qb[i * d + c]) * kb[j * d + c]);
        }
        s[i * nk + j] = scale * dot;
        S[i * nk + j] = scale * mag;
        const bool outside = window > 0 && (causal ? j <= i - window : std::abs(i - j) > window / 2);
        seen[i * nk + j] = !(pad_b && pad_b[j] != 0.0f) && !(causal && j > i) && !outside;
        if (seen[i * nk + j]) m = std::max(m, s[i * nk + j]), lo = std::min(lo, s[i * nk + j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < nk; ++j) sum += seen[i * nk + j] ? std::exp(s[i * nk + j] - m) : 0.0;
      lse[i] = sum > 0 ? m + std::log(sum) : INFINITY;
      l[i] = sum;
      range[i] = sum > 0 ? m - lo : 0.0;
      const double lse_given = lse_in[bh * nq + i];
      for (int64_t j = 0; j < nk; ++j) {
        const bool on = seen[i * nk + j] && sum > 0;
        p[i * nk + j] = on ? std::exp(s[i * nk + j] - lse[i]) : 0.0;
        pb[i * nk + j] = on && std::isfinite(lse_given) ? std::exp(s[i * nk + j] - lse_given) : 0.0;
      }
      for (int64_t c = 0; c < e; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < nk; ++j) acc += p[i * nk + j] * vb[j * e + c];
        out[i * e + c] = acc;
      }
      double D = 0.0, MD = 0.0;
      for (int64_t c = 0; c < e; ++c) {
        D += static_cast<double>(gb[i * e + c]) * ob[i * e + c];
        MD += std::fabs(static_cast<double>(gb[i * e + c]) * ob[i * e + c]);
      }
      dvec[i] = D, mdvec[i] = MD;
      for (int64_t j = 0; j < nk; ++j) {
        double dot = 0.0, mag = 0.0;
        for (int64_t c = 0; c < e; ++c) {
          dot += static_cast<double>(gb[i * e + c]) * vb[j * e + c];
          mag += std::fabs(static_cast<double>(gb[i * e + c]) * vb[j * e + c]);
        }
        dp[i * nk + j] = dot, mp[i * nk + j] = mag;
        ds[i * nk + j] = scale * pb[i * nk + j] * (dot - D);
      }
    }
    std::fill(dq.begin(), dq.end(), 0.0);
    std::fill(dk.begin(), dk.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          dq[i * d + c] += ds[i * nk + j] * kb[j * d + c];
          dk[j * d + c] += ds[i * nk + j] * qb[i * d + c];
        }
        for (int64_t c = 0; c < e; ++c) dv[j * e + c] += pb[i * nk + j] * gb[i * e + c];
      }

    double* bo = b.out.data() + bh * nq * e;
    double* bl = b.lse.data() + bh * nq;
    double* bq = b.dq.data() + bh * nq * d;
    double* bk = b.dk.data() + bh * nk * d;
    double* bv = b.dv.data() + bh * nk * e;
    for (const Rounding& r : sides) {
      const double g_d = Gamma(d + 1, r.u), g_e = Gamma(e, r.u), g_out = Gamma(2 * nk + 2, r.u);
      const double g_q = Gamma(nq + 1, r.u), g_k = Gamma(nk + 1, r.u);
      for (int64_t i = 0; i < nq; ++i) {
        if (!(l[i] > 0)) continue;  // sees no key: out = 0, lse = inf on both sides, exactly
        const double m = lse[i] - std::log(l[i]);
        double prho = 0.0;  // sum_j p rho: the weights' error, relative to l
        for (int64_t j = 0; j < nk; ++j) {
          if (p[i * nk + j] == 0.0) continue;
          const double rho =
              g_d * S[i * nk + j] + r.u * (m - s[i * nk + j]) + ExpError(r, std::exp(s[i * nk + j] - m)) + r.operand;
          prho += p[i * nk + j] * rho;
          for (int64_t c = 0; c < e; ++c) bo[i * e + c] += p[i * nk + j] * (rho + g_out) * std::fabs(vb[j * e + c]);
        }
        for (int64_t c = 0; c < e; ++c) bo[i * e + c] += std::fabs(out[i * e + c]) * (prho + g_out + r.store);
        bl[i] += prho + g_out + nk * r.exp + r.u * range[i] + r.log * std::fabs(std::log(l[i])) +
                 r.u * std::fabs(lse[i]);
      }
      // Backward: each dS_ij's error E_ij, then the three sums.
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) {
          const double pij = pb[i * nk + j];
          if (pij == 0.0) continue;
          const double lse_given = lse_in[bh * nq + i];
          const double rho = g_d * S[i * nk + j] + r.u * std::fabs(s[i * nk + j] - lse_given) + ExpError(r, pij);
          const double diff = std::fabs(dp[i * nk + j] - dvec[i]);
          const double err = scale * pij * ((rho + 3 * r.u) * diff + g_e * (mp[i * nk + j] + mdvec[i])) +
                             r.operand * std::fabs(ds[i * nk + j]);
          const double mag = std::fabs(ds[i * nk + j]);
          for (int64_t c = 0; c < d; ++c) {
            bq[i * d + c] += (err + g_k * mag) * std::fabs(kb[j * d + c]);
            bk[j * d + c] += (err + g_q * mag) * std::fabs(qb[i * d + c]);
          }
          for (int64_t c = 0; c < e; ++c)
            bv[j * e + c] += pij * (rho + r.operand + g_q) * std::fabs(gb[i * e + c]);
        }
      for (int64_t x = 0; x < nq * d; ++x) bq[x] += r.store * std::fabs(dq[x]);
      for (int64_t x = 0; x < nk * d; ++x) bk[x] += r.store * std::fabs(dk[x]);
      for (int64_t x = 0; x < nk * e; ++x) bv[x] += r.store * std::fabs(dv[x]);
    }
  }
  for (auto* v : {&b.out, &b.lse, &b.dq, &b.dk, &b.dv})
    for (double& x : *v) x *= 1 + second_order;
  return b;
}

}  // namespace tarn::cuda_testing
