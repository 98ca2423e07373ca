#pragma once
// Per-element error bounds of linear attention (kernels/linear_attention.h: forward out and den,
// backward da, db, dv from a given out and den, the recurrent state) with its fused feature
// maps, for the conformance tests of the f32 CUDA kernels: a first-order worst-case analysis
// (tests/cuda/tolerance.h) evaluated in double on the test's data, for each implementation's
// rounding, summed over the device and the CPU reference. It holds for any chunking, scan
// order or sequence split (each is an order of the same sums); a wrong mask, chunk, state or
// feature moves outputs by their own size.
//
// The error model, with phi the feature map, A_ij = phi(a_i).phi(b_j) over visible pairs and
// |A|_ij = |phi(a_i)|.|phi(b_j)|:
//   features     phi relative error eps_phi: elu1 u (x + 1) or exp (e^x); exp map exp +
//                u |x - max x| (the subtraction); relu and identity exact; an exp below the
//                smallest normal f32 may lose all of itself (ExpError)
//   A            E_ij = sum_k |phi(a_ik)| |phi(b_jk)| (eps_phi(a_ik) + eps_phi(b_jk))
//   num, den     sum_j A_ij [v_j | 1]: each term a_ik b_jk v_jc passes 2 products and at most
//                d + Nk additions, however the chunks, states and segments group them:
//                sum_j (E_ij + gamma_{d+Nk+2} |A|_ij) [|v_j| | 1]
//   out          num / (den + eps): (|d num| + |out| (|d den| + u (den + eps))) / (den + eps)
//                + 2 u |out| (the reciprocal and product)
//   backward     g = dout / (den + eps) (3 roundings), r_ij = g_i.(v_j - out_i) with
//                |r|_ij = |g_i|.(|v_j| + |out_i|); dphi(a)_i = sum_j r_ij phi(b_j) and
//                dphi(b)_j = sum_i r_ij phi(a_i), each term through 2 products and at most
//                2 e + N + 2 additions; dv_j = sum_i A_ij g_i; then through phi' (elu1: e^x for
//                x <= 0; exp map: phi_k dphi_k - [k = argmax] sum_l phi_l dphi_l)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {

struct LinearAttentionBounds {
  std::vector<double> out, den, da, db, dv;
};

// What the bound needs besides the data: the op's configuration, and optional bounds on how far
// the two sides' a and b already differ (features made upstream, e.g. by favor; identity map).
struct LinearAttentionBoundConfig {
  bool causal = false;
  std::vector<float> pad;  // (batch, n_k), nonzero = padded; or empty
  kernels::cpu::FeatureMap map = kernels::cpu::FeatureMap::identity;
  float eps = kernels::cpu::kDefaultLinearAttentionEps;
  const std::vector<double>* a_apart = nullptr;  // |a_device - a_cpu| per element, or null
  const std::vector<double>* b_apart = nullptr;
};

namespace linear_attention_bound {

// phi(x) of one row in double, and the relative error bound of one side's phi.
inline void Features(kernels::cpu::FeatureMap map, const float* x, int64_t d, double* phi) {
  using kernels::cpu::FeatureMap;
  const double top = *std::max_element(x, x + d);
  for (int64_t k = 0; k < d; ++k) {
    const double xk = x[k];
    switch (map) {
      case FeatureMap::elu1: phi[k] = xk > 0 ? xk + 1 : std::exp(xk); break;
      case FeatureMap::relu: phi[k] = std::max(xk, 0.0); break;
      case FeatureMap::exp: phi[k] = std::exp(xk - top); break;
      default: phi[k] = xk; break;
    }
  }
}

inline void FeatureErrors(kernels::cpu::FeatureMap map, const float* x, int64_t d, const Rounding& r, double* err) {
  using kernels::cpu::FeatureMap;
  const double top = *std::max_element(x, x + d);
  for (int64_t k = 0; k < d; ++k) {
    switch (map) {
      case FeatureMap::elu1: err[k] = x[k] > 0 ? r.u : ExpError(r, std::exp(double(x[k]))); break;
      case FeatureMap::exp: err[k] = ExpError(r, std::exp(x[k] - top)) + r.u * (top - x[k]); break;
      default: err[k] = 0.0; break;
    }
  }
}

// dx from dphi through the map, in double, and the bound on its error given dphi's error.
inline void Chain(kernels::cpu::FeatureMap map, const float* x, int64_t d, const double* phi, const double* gphi,
                  const double* gphi_err, const double* phi_err, const Rounding& r, double* dx, double* dx_err) {
  using kernels::cpu::FeatureMap;
  const int64_t top = std::max_element(x, x + d) - x;  // the first largest, as the kernels
  double dot = 0.0, dot_err = 0.0, dot_mag = 0.0;
  for (int64_t k = 0; k < d; ++k) {
    switch (map) {
      case FeatureMap::elu1:
        dx[k] = x[k] > 0 ? gphi[k] : phi[k] * gphi[k];
        dx_err[k] = x[k] > 0 ? gphi_err[k] : phi[k] * (gphi_err[k] + (ExpError(r, phi[k]) + r.u) * std::fabs(gphi[k]));
        break;
      case FeatureMap::relu:
        dx[k] = x[k] > 0 ? gphi[k] : 0.0;
        dx_err[k] = x[k] > 0 ? gphi_err[k] : 0.0;
        break;
      case FeatureMap::exp:
        dx[k] = phi[k] * gphi[k];
        dx_err[k] = phi[k] * (gphi_err[k] + (phi_err[k] + r.u) * std::fabs(gphi[k]));
        dot += dx[k], dot_err += dx_err[k], dot_mag += std::fabs(dx[k]);
        break;
      default:
        dx[k] = gphi[k];
        dx_err[k] = gphi_err[k];
        break;
    }
  }
  if (map == FeatureMap::exp) {
    dx[top] -= dot;
    dx_err[top] += dot_err + Gamma(d + 1, r.u) * dot_mag;
  }
}

}  // namespace linear_attention_bound

// The bound on |device - CPU| for each output: forward from a, b, v (the raw q, k under a fused
// map); backward from a, b, v, dout and the given out_in, den_in.
inline LinearAttentionBounds LinearAttentionErrorBounds(const kernels::cpu::LinearAttentionDims& dims,
                                                        const LinearAttentionBoundConfig& cfg,
                                                        const std::vector<float>& a, const std::vector<float>& b,
                                                        const std::vector<float>& v, const std::vector<float>& dout,
                                                        const std::vector<float>& out_in,
                                                        const std::vector<float>& den_in,
                                                        const std::vector<Rounding>& sides) {
  namespace lab = linear_attention_bound;
  const int64_t nq = dims.n_q, nk = dims.n_k, d = dims.d, e = dims.e, slices = dims.batch * dims.heads;
  const bool backward = !dout.empty();
  LinearAttentionBounds bd;
  bd.out.assign(slices * nq * e, 0.0);
  bd.den.assign(slices * nq, 0.0);
  bd.da.assign(slices * nq * d, 0.0);
  bd.db.assign(slices * nk * d, 0.0);
  bd.dv.assign(slices * nk * e, 0.0);
  std::vector<double> pa(nq * d), pb(nk * d), ea(nq * d), eb(nk * d);
  std::vector<double> A(nq * nk), MA(nq * nk), EA(nq * nk), R(nq * nk), MR(nq * nk);
  std::vector<double> den(nq), out(nq * e), g(nq * e);
  std::vector<double> ga(nq * d), gb(nk * d), ga_err(nq * d), gb_err(nk * d), dx(d), dx_err(d);
  std::vector<char> seen(nq * nk);
  for (int64_t s = 0; s < slices; ++s) {
    const float* as = a.data() + s * nq * d;
    const float* bs = b.data() + s * nk * d;
    const float* vs = v.data() + s * nk * e;
    const float* pad = cfg.pad.empty() ? nullptr : cfg.pad.data() + (s / dims.heads) * nk;
    const double* a_apart = cfg.a_apart ? cfg.a_apart->data() + s * nq * d : nullptr;
    const double* b_apart = cfg.b_apart ? cfg.b_apart->data() + s * nk * d : nullptr;
    for (int64_t i = 0; i < nq; ++i) lab::Features(cfg.map, as + i * d, d, pa.data() + i * d);
    for (int64_t j = 0; j < nk; ++j) lab::Features(cfg.map, bs + j * d, d, pb.data() + j * d);
    // Exact A, den, out in double; the apart bounds enter A's error once.
    std::vector<double> apart(nq * nk, 0.0);
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        seen[i * nk + j] = !(pad && pad[j] != 0.0f) && !(cfg.causal && j > i);
        double dot = 0.0, mag = 0.0, ap = 0.0;
        for (int64_t k = 0; k < d; ++k) {
          dot += pa[i * d + k] * pb[j * d + k];
          mag += std::fabs(pa[i * d + k] * pb[j * d + k]);
          if (a_apart) ap += (*(a_apart + i * d + k)) * std::fabs(pb[j * d + k]);
          if (b_apart) ap += std::fabs(pa[i * d + k]) * (*(b_apart + j * d + k));
        }
        A[i * nk + j] = seen[i * nk + j] ? dot : 0.0;
        MA[i * nk + j] = seen[i * nk + j] ? mag : 0.0;
        apart[i * nk + j] = seen[i * nk + j] ? ap : 0.0;
      }
    for (int64_t i = 0; i < nq; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < nk; ++j) sum += A[i * nk + j];
      den[i] = sum;
      for (int64_t c = 0; c < e; ++c) {
        double num = 0.0;
        for (int64_t j = 0; j < nk; ++j) num += A[i * nk + j] * vs[j * e + c];
        out[i * e + c] = num / (sum + cfg.eps);
      }
    }
    // Backward's exact r, dphi(a), dphi(b) from the given out and den.
    const float* gs = backward ? dout.data() + s * nq * e : nullptr;
    const float* os = backward ? out_in.data() + s * nq * e : nullptr;
    if (backward) {
      for (int64_t i = 0; i < nq; ++i) {
        const double shifted = static_cast<double>(den_in[s * nq + i]) + cfg.eps;
        for (int64_t c = 0; c < e; ++c) g[i * e + c] = gs[i * e + c] / shifted;
      }
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) {
          double dot = 0.0, mag = 0.0;
          if (seen[i * nk + j])
            for (int64_t c = 0; c < e; ++c) {
              dot += g[i * e + c] * (vs[j * e + c] - static_cast<double>(os[i * e + c]));
              mag += std::fabs(g[i * e + c]) * (std::fabs(vs[j * e + c]) + std::fabs(os[i * e + c]));
            }
          R[i * nk + j] = dot, MR[i * nk + j] = mag;
        }
      std::fill(ga.begin(), ga.end(), 0.0);
      std::fill(gb.begin(), gb.end(), 0.0);
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t k = 0; k < d; ++k) {
            ga[i * d + k] += R[i * nk + j] * pb[j * d + k];
            gb[j * d + k] += R[i * nk + j] * pa[i * d + k];
          }
    }

    bool first = true;
    for (const Rounding& r : sides) {
      for (int64_t i = 0; i < nq; ++i) lab::FeatureErrors(cfg.map, as + i * d, d, r, ea.data() + i * d);
      for (int64_t j = 0; j < nk; ++j) lab::FeatureErrors(cfg.map, bs + j * d, d, r, eb.data() + j * d);
      for (int64_t i = 0; i < nq; ++i)
        for (int64_t j = 0; j < nk; ++j) {
          double err = first ? apart[i * nk + j] : 0.0;
          if (seen[i * nk + j])
            for (int64_t k = 0; k < d; ++k)
              err += std::fabs(pa[i * d + k] * pb[j * d + k]) * (ea[i * d + k] + eb[j * d + k]);
          EA[i * nk + j] = err;
        }
      // Forward.
      const double g_sum = Gamma(d + nk + 2, r.u);
      double* bo = bd.out.data() + s * nq * e;
      double* bn = bd.den.data() + s * nq;
      for (int64_t i = 0; i < nq; ++i) {
        double dden = 0.0;
        for (int64_t j = 0; j < nk; ++j) dden += EA[i * nk + j] + g_sum * MA[i * nk + j];
        bn[i] += dden;
        const double shifted = den[i] + cfg.eps;
        for (int64_t c = 0; c < e; ++c) {
          double dnum = 0.0;
          for (int64_t j = 0; j < nk; ++j) dnum += (EA[i * nk + j] + g_sum * MA[i * nk + j]) * std::fabs(vs[j * e + c]);
          const double o = std::fabs(out[i * e + c]);
          bo[i * e + c] += (dnum + o * (dden + r.u * shifted)) / shifted + 2 * r.u * o;
        }
      }
      if (backward) {
        const double g_err = 3 * r.u;  // g = dout / (den + eps): the sum, the reciprocal, the product
        const double g_a = Gamma(2 * e + nk + 4, r.u), g_b = Gamma(2 * e + nq + 4, r.u), g_v = Gamma(d + nq + 2, r.u);
        std::fill(ga_err.begin(), ga_err.end(), 0.0);
        std::fill(gb_err.begin(), gb_err.end(), 0.0);
        double* bv = bd.dv.data() + s * nk * e;
        for (int64_t i = 0; i < nq; ++i)
          for (int64_t j = 0; j < nk; ++j) {
            if (!seen[i * nk + j]) continue;
            const double rij = std::fabs(R[i * nk + j]), mr = MR[i * nk + j];
            for (int64_t k = 0; k < d; ++k) {
              const double fb = std::fabs(pb[j * d + k]), fa = std::fabs(pa[i * d + k]);
              ga_err[i * d + k] += (g_a + g_err) * mr * fb + rij * eb[j * d + k] * fb;
              gb_err[j * d + k] += (g_b + g_err) * mr * fa + rij * ea[i * d + k] * fa;
              if (first && b_apart) ga_err[i * d + k] += rij * b_apart[j * d + k];
              if (first && a_apart) gb_err[j * d + k] += rij * a_apart[i * d + k];
            }
            const double w = EA[i * nk + j] + (g_v + g_err) * MA[i * nk + j];
            for (int64_t c = 0; c < e; ++c) bv[j * e + c] += w * std::fabs(g[i * e + c]);
          }
        double* ba = bd.da.data() + s * nq * d;
        double* bb = bd.db.data() + s * nk * d;
        for (int64_t i = 0; i < nq; ++i) {
          lab::Chain(cfg.map, as + i * d, d, pa.data() + i * d, ga.data() + i * d, ga_err.data() + i * d,
                     ea.data() + i * d, r, dx.data(), dx_err.data());
          for (int64_t k = 0; k < d; ++k) ba[i * d + k] += dx_err[k];
        }
        for (int64_t j = 0; j < nk; ++j) {
          lab::Chain(cfg.map, bs + j * d, d, pb.data() + j * d, gb.data() + j * d, gb_err.data() + j * d,
                     eb.data() + j * d, r, dx.data(), dx_err.data());
          for (int64_t k = 0; k < d; ++k) bb[j * d + k] += dx_err[k];
        }
      }
      first = false;
    }
  }
  return bd;
}

// The recurrent state (B, H, d, e + 1) after the steps whose b, v (each (B, H, steps, d or e))
// and key padding (B, steps) are given: row k holds sum_t phi(b_tk) [v_t | 1] over unpadded
// steps, one product and one addition per step: sum_t |phi(b_tk)| [|v_t| | 1] (eps_phi +
// gamma_{steps + 1}) on each side.
inline std::vector<double> LinearAttentionStateErrorBound(int64_t slices, int64_t heads, int64_t steps, int64_t d,
                                                          int64_t e, kernels::cpu::FeatureMap map,
                                                          const std::vector<float>& b, const std::vector<float>& v,
                                                          const std::vector<float>& pad,
                                                          const std::vector<Rounding>& sides) {
  std::vector<double> bound(slices * d * (e + 1), 0.0), phi(d), err(d);
  for (int64_t s = 0; s < slices; ++s)
    for (int64_t t = 0; t < steps; ++t) {
      if (pad[(s / heads) * steps + t] != 0.0f) continue;
      const float* bt = b.data() + (s * steps + t) * d;
      linear_attention_bound::Features(map, bt, d, phi.data());
      for (const Rounding& r : sides) {
        linear_attention_bound::FeatureErrors(map, bt, d, r, err.data());
        const double g = Gamma(steps + 1, r.u);
        for (int64_t k = 0; k < d; ++k)
          for (int64_t c = 0; c <= e; ++c) {
            const double vc = c < e ? std::fabs(v[(s * steps + t) * e + c]) : 1.0;
            bound[(s * d + k) * (e + 1) + c] += std::fabs(phi[k]) * vc * (err[k] + g);
          }
      }
    }
  return bound;
}

}  // namespace tarn::cuda_testing
