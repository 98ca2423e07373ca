#pragma once
// Naive O(N^2) double-precision references for the attention kernels, written from the
// definitions (not from the kernels' chunked algebra), plus test-data helpers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/feature_maps.h"

namespace tarn::attention_test {

using kernels::cpu::FeatureMap;
using Doubles = std::vector<double>;
using Floats = std::vector<float>;

inline Floats normal_floats(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Floats x(n);
  for (auto& v : x) v = shift + scale * dist(rng);
  return x;
}

inline Floats uniform_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// max |x - ref| / max |ref|: the error relative to the scale of the result.
template <class X>
double relative_error(const X& x, const Doubles& ref) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(double(x[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

// max |x - ref| / max(max |ref|, max terms): the same, where the reference is a sum whose
// terms cancel, relative to the magnitude of those terms (what f32 rounding scales with).
template <class X>
double relative_error(const X& x, const Doubles& ref, const Doubles& terms) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(double(x[i]) - ref[i]));
    scale = std::max({scale, std::abs(ref[i]), terms[i]});
  }
  return scale > 0.0 ? err / scale : err;
}

inline double max_abs(const Doubles& x) {
  double m = 0.0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

inline bool all_finite(const Floats& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

// ---- feature maps ----

inline void phi_row(FeatureMap kind, const float* x, int64_t d, double* y) {
  double mx = -INFINITY;
  for (int64_t k = 0; k < d; ++k) mx = std::max(mx, double(x[k]));
  for (int64_t k = 0; k < d; ++k) {
    const double v = x[k];
    switch (kind) {
      case FeatureMap::elu1: y[k] = v > 0 ? v + 1 : std::exp(v); break;
      case FeatureMap::relu: y[k] = v > 0 ? v : 0; break;
      case FeatureMap::exp: y[k] = std::exp(v - mx); break;
      default: y[k] = v; break;
    }
  }
}

// dx = J_phi(x)^T dy, from the derivative of each definition.
inline void phi_row_backward(FeatureMap kind, const float* x, int64_t d, const double* dy,
                             double* dx) {
  int64_t top = 0;
  for (int64_t k = 1; k < d; ++k)
    if (x[k] > x[top]) top = k;
  double dot = 0.0;
  for (int64_t k = 0; k < d; ++k) {
    const double v = x[k];
    switch (kind) {
      case FeatureMap::elu1: dx[k] = dy[k] * (v > 0 ? 1.0 : std::exp(v)); break;
      case FeatureMap::relu: dx[k] = v > 0 ? dy[k] : 0.0; break;
      case FeatureMap::exp: {
        const double y = std::exp(v - double(x[top]));
        dx[k] = y * dy[k];
        dot += y * dy[k];
        break;
      }
      default: dx[k] = dy[k]; break;
    }
  }
  if (kind == FeatureMap::exp) dx[top] -= dot;
}

inline Doubles phi_rows(FeatureMap kind, const Floats& x, int64_t d) {
  Doubles y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) phi_row(kind, x.data() + r * d, d, y.data() + r * d);
  return y;
}

inline Doubles phi_rows_backward(FeatureMap kind, const Floats& x, int64_t d, const Doubles& dy) {
  Doubles dx(x.size());
  for (size_t r = 0; r < x.size() / d; ++r)
    phi_row_backward(kind, x.data() + r * d, d, dy.data() + r * d, dx.data() + r * d);
  return dx;
}

// ---- linear attention ----

struct LinearShape {
  int64_t batch, heads, n_q, n_k, d, e;
};

struct LinearRef {
  Doubles out, den, da, db, dv;
  // sum of |terms| of each da, db entry: the scale that f32 rounding errors are relative to
  // (at N = 1, num and den cancel and the exact da, db are O(eps) times this).
  Doubles da_terms, db_terms;
};

// out_i = sum_{visible j} (a_i . b_j) v_j / (sum_{visible j} a_i . b_j + eps) and its exact
// gradients by the chain rule through num and den.
inline LinearRef linear_reference(const LinearShape& s, bool causal, const float* pad, double eps,
                                  const Doubles& a, const Doubles& b, const Floats& v,
                                  const Floats& dout) {
  LinearRef r;
  const int64_t d = s.d, e = s.e;
  r.out.assign(s.batch * s.heads * s.n_q * e, 0.0);
  r.den.assign(s.batch * s.heads * s.n_q, 0.0);
  r.da.assign(a.size(), 0.0);
  r.db.assign(b.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.da_terms.assign(a.size(), 0.0);
  r.db_terms.assign(b.size(), 0.0);
  Doubles num(e), dnum(e);
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    const double* A = a.data() + bh * s.n_q * d;
    const double* B = b.data() + bh * s.n_k * d;
    const float* V = v.data() + bh * s.n_k * e;
    const float* dO = dout.data() + bh * s.n_q * e;
    const float* P = pad ? pad + (bh / s.heads) * s.n_k : nullptr;
    auto visible = [&](int64_t i, int64_t j) { return (!causal || j <= i) && !(P && P[j] != 0); };
    for (int64_t i = 0; i < s.n_q; ++i) {
      std::fill(num.begin(), num.end(), 0.0);
      double den = 0.0;
      for (int64_t j = 0; j < s.n_k; ++j) {
        if (!visible(i, j)) continue;
        double w = 0.0;
        for (int64_t k = 0; k < d; ++k) w += A[i * d + k] * B[j * d + k];
        for (int64_t x = 0; x < e; ++x) num[x] += w * V[j * e + x];
        den += w;
      }
      const double inv = 1.0 / (den + eps);
      double dden = 0.0;
      for (int64_t x = 0; x < e; ++x) {
        r.out[(bh * s.n_q + i) * e + x] = num[x] * inv;
        dnum[x] = dO[i * e + x] * inv;
        dden -= dO[i * e + x] * num[x] * inv * inv;
      }
      r.den[bh * s.n_q + i] = den;
      for (int64_t j = 0; j < s.n_k; ++j) {
        if (!visible(i, j)) continue;
        double c = dden, c_terms = std::abs(dden), w = 0.0;  // dL / d(a_i . b_j)
        for (int64_t x = 0; x < e; ++x) {
          c += dnum[x] * V[j * e + x];
          c_terms += std::abs(dnum[x] * V[j * e + x]);
        }
        for (int64_t k = 0; k < d; ++k) w += A[i * d + k] * B[j * d + k];
        for (int64_t k = 0; k < d; ++k) {
          r.da[(bh * s.n_q + i) * d + k] += c * B[j * d + k];
          r.db[(bh * s.n_k + j) * d + k] += c * A[i * d + k];
          r.da_terms[(bh * s.n_q + i) * d + k] += c_terms * std::abs(B[j * d + k]);
          r.db_terms[(bh * s.n_k + j) * d + k] += c_terms * std::abs(A[i * d + k]);
        }
        for (int64_t x = 0; x < e; ++x) r.dv[(bh * s.n_k + j) * e + x] += w * dnum[x];
      }
    }
  }
  return r;
}

// ---- softmax attention ----

struct SoftmaxRef {
  Doubles out, dq, dk, dv;
};

// window > 0: sliding-window attention, written out independently of the kernels' helper:
// causal, query i sees keys i - window < j <= i; bidirectional, |i - j| <= window / 2.
inline SoftmaxRef softmax_reference(const LinearShape& s, bool causal, const float* pad,
                                    double scale, const Floats& q, const Floats& k,
                                    const Floats& v, const Floats& dout, int64_t window = 0) {
  SoftmaxRef r;
  const int64_t d = s.d, e = s.e;
  r.out.assign(s.batch * s.heads * s.n_q * e, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  Doubles p(s.n_k), dp(s.n_k);
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    const float* Q = q.data() + bh * s.n_q * d;
    const float* K = k.data() + bh * s.n_k * d;
    const float* V = v.data() + bh * s.n_k * e;
    const float* dO = dout.data() + bh * s.n_q * e;
    const float* P = pad ? pad + (bh / s.heads) * s.n_k : nullptr;
    for (int64_t i = 0; i < s.n_q; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < s.n_k; ++j) {
        p[j] = -INFINITY;
        if ((causal && j > i) || (P && P[j] != 0)) continue;
        if (window > 0 && (causal ? j <= i - window : std::abs(i - j) > window / 2)) continue;
        double dot = 0.0;
        for (int64_t x = 0; x < d; ++x) dot += double(Q[i * d + x]) * K[j * d + x];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      if (mx == -INFINITY) continue;  // sees no key: out = 0, no gradient
      double sum = 0.0;
      for (int64_t j = 0; j < s.n_k; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j < s.n_k; ++j) p[j] /= sum;
      double dsum = 0.0;
      for (int64_t j = 0; j < s.n_k; ++j) {
        dp[j] = 0.0;
        for (int64_t x = 0; x < e; ++x) {
          r.out[(bh * s.n_q + i) * e + x] += p[j] * V[j * e + x];
          dp[j] += double(dO[i * e + x]) * V[j * e + x];
          r.dv[(bh * s.n_k + j) * e + x] += p[j] * dO[i * e + x];
        }
        dsum += p[j] * dp[j];
      }
      for (int64_t j = 0; j < s.n_k; ++j) {
        const double ds = p[j] * (dp[j] - dsum) * scale;
        for (int64_t x = 0; x < d; ++x) {
          r.dq[(bh * s.n_q + i) * d + x] += ds * K[j * d + x];
          r.dk[(bh * s.n_k + j) * d + x] += ds * Q[i * d + x];
        }
      }
    }
  }
  return r;
}

}  // namespace tarn::attention_test
