#pragma once
// A naive BART forward in double precision, written from docs/design.md section 3 and HF's
// modeling_bart.py with plain loops and no tarn ops: the reference the layers are checked
// against. It reads the weights by their HF names from a BartForConditionalGeneration.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "framework/rng.h"
#include "layers/bart.h"

namespace tarn::testing {

using Mat = std::vector<double>;  // row-major

// A model with every parameter and buffer set to random values (LayerNorm weights near 1,
// others small), so that no term of the reference is trivially zero or one.
inline void randomize_parameters(BartForConditionalGeneration& model, uint64_t seed) {
  Philox rng(seed);
  auto fill = [&](const std::string& name, Tensor* t) {
    float* p = t->f32();
    const bool norm_weight = (name.find("layer_norm") != std::string::npos ||
                              name.find("layernorm") != std::string::npos) &&
                             name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    const bool embed = name.find("shared") != std::string::npos || name.find("embed_positions") != std::string::npos;
    const float fan_in = t->dim() == 2 ? static_cast<float>(t->size(1)) : 1.0f;
    for (int64_t i = 0; i < t->numel(); ++i) {
      const float u = 2.0f * rng.uniform() - 1.0f;
      if (norm_weight)
        p[i] = 1.0f + 0.3f * u;
      else if (bias)
        p[i] = 0.2f * u;
      else if (embed)
        p[i] = u;
      else
        p[i] = 1.7f * u / std::sqrt(fan_in);
    }
  };
  for (auto& [name, t] : model.named_parameters()) fill(name, t);
  for (auto& [name, t] : model.named_buffers())
    if (name.find("favor_projection") == std::string::npos) fill(name, t);
}

class BartReference {
 public:
  explicit BartReference(const BartForConditionalGeneration& model) : c_(model.config()) {
    for (auto& [name, t] : model.named_parameters()) take(name, *t);
    for (auto& [name, t] : model.named_buffers()) take(name, *t);
  }

  // Logits (B, T, V) for one batch, as the model's forward() should compute them.
  Mat forward(const std::vector<int32_t>& src, int64_t batch, int64_t s_len, const PaddingMask& src_pad,
              const std::vector<int32_t>& tgt, int64_t t_len) const {
    const int64_t d = c_.d_model, v = c_.vocab_size;
    Mat logits;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int32_t> src_row(src.begin() + b * s_len, src.begin() + (b + 1) * s_len);
      std::vector<int32_t> tgt_row(tgt.begin() + b * t_len, tgt.begin() + (b + 1) * t_len);
      std::vector<bool> pad(static_cast<size_t>(s_len), false);
      for (int64_t j = 0; j < s_len; ++j) pad[j] = !src_pad.empty() && src_pad[b * s_len + j];
      const Mat enc = encoder(src_row, pad);
      const Mat dec = decoder(tgt_row, enc, s_len, pad);
      const Mat& shared = p("model.shared.weight");
      const Mat& bias = p("final_logits_bias");
      for (int64_t t = 0; t < t_len; ++t)
        for (int64_t k = 0; k < v; ++k) {
          double s = bias[k];
          for (int64_t i = 0; i < d; ++i) s += dec[t * d + i] * shared[k * d + i];
          logits.push_back(s);
        }
    }
    return logits;
  }

 private:
  void take(const std::string& name, const Tensor& t) {
    const std::vector<float> v = t.to_vector();
    params_[name] = Mat(v.begin(), v.end());
  }
  const Mat& p(const std::string& name) const {
    auto it = params_.find(name);
    if (it == params_.end()) throw Error("reference: no parameter " + name);
    return it->second;
  }

  Mat embed(const std::vector<int32_t>& ids, const std::string& stack) const {
    const int64_t d = c_.d_model, n = static_cast<int64_t>(ids.size());
    const double scale = c_.scale_embedding ? std::sqrt(static_cast<double>(d)) : 1.0;
    const Mat& shared = p("model.shared.weight");
    const Mat& pos = p("model." + stack + ".embed_positions.weight");
    Mat x(static_cast<size_t>(n * d));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i) x[t * d + i] = shared[ids[t] * d + i] * scale + pos[(t + 2) * d + i];
    return layer_norm(x, "model." + stack + ".layernorm_embedding");
  }

  Mat layer_norm(const Mat& x, const std::string& name) const {
    const int64_t d = c_.d_model, n = static_cast<int64_t>(x.size()) / d;
    const Mat& w = p(name + ".weight");
    const Mat& b = p(name + ".bias");
    Mat y(x.size());
    for (int64_t r = 0; r < n; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < d; ++i) mean += x[r * d + i];
      mean /= d;
      for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
      var /= d;
      for (int64_t i = 0; i < d; ++i)
        y[r * d + i] = (x[r * d + i] - mean) / std::sqrt(var + c_.layer_norm_eps) * w[i] + b[i];
    }
    return y;
  }

  // x (n, in) -> (n, out) with weight (out, in) as HF stores it.
  Mat linear(const Mat& x, int64_t in, const std::string& name) const {
    const Mat& w = p(name + ".weight");
    const Mat& b = p(name + ".bias");
    const int64_t out = static_cast<int64_t>(b.size()), n = static_cast<int64_t>(x.size()) / in;
    Mat y(static_cast<size_t>(n * out));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = b[o];
        for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
        y[r * out + o] = s;
      }
    return y;
  }

  // φ of the rows of one head (n rows of dh, taken from x (n, D) at column offset col):
  // (n, f). Stabilisers as framework/ops/attention.h: exp subtracts each row's max; favor
  // queries their row max, favor keys the max over the whole (batch, head) slice, or nothing
  // in causal self-attention (layers/attention/feature_map.h).
  Mat features(const Mat& x, int64_t n, int64_t col, int64_t dh, const AttentionConfig& cfg, bool key, bool causal,
               const std::string& name) const {
    const int64_t d = c_.d_model;
    const std::string map = kernels::cpu::feature_map_name(cfg.feature_map);
    if (map == "taylor") {  // u^alpha / sqrt(alpha!) over multisets alpha of <= P indices, u = p / r^(1/4), p = x W^T
      const Mat& w = p(name + ".taylor_proj.weight");
      const int64_t r = static_cast<int64_t>(w.size()) / dh;
      Mat y;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> u(static_cast<size_t>(r), 0.0);
        for (int64_t a = 0; a < r; ++a) {
          for (int64_t e = 0; e < dh; ++e) u[a] += w[a * dh + e] * x[i * d + col + e];
          u[a] /= std::pow(double(r), 0.25);
        }
        std::vector<int64_t> idx;
        // Degree by degree, index tuples i_1 <= ... <= i_n in lexicographic order.
        std::function<void(int64_t, int64_t)> emit = [&](int64_t left, int64_t lo) {
          if (left > 0) {
            for (int64_t a = lo; a < r; ++a) {
              idx.push_back(a);
              emit(left - 1, a);
              idx.pop_back();
            }
            return;
          }
          double v = 1, factorial = 1, run = 0;
          for (size_t j = 0; j < idx.size(); ++j) {
            run = j > 0 && idx[j] == idx[j - 1] ? run + 1 : 1;
            factorial *= run;
            v *= u[idx[j]];
          }
          y.push_back(v / std::sqrt(factorial));
        };
        for (int64_t degree = 0; degree <= cfg.taylor_order; ++degree) emit(degree, 0);
      }
      return y;
    }
    if (map == "hedgehog") {  // [softmax(p), softmax(-p)], p = W_h x with this head's (dh, dh) W_h
      const Mat& w = p(name + (key ? ".hedgehog_k" : ".hedgehog_q"));
      const int64_t h = col / dh;
      Mat y(static_cast<size_t>(n * 2 * dh));
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> pr(static_cast<size_t>(dh), 0.0);
        for (int64_t a = 0; a < dh; ++a)
          for (int64_t e = 0; e < dh; ++e) pr[a] += w[(h * dh + a) * dh + e] * x[i * d + col + e];
        for (int sign : {1, -1}) {
          double mx = -1e300, z = 0;
          for (double v : pr) mx = std::max(mx, sign * v);
          for (double v : pr) z += std::exp(sign * v - mx);
          for (int64_t a = 0; a < dh; ++a)
            y[i * 2 * dh + (sign > 0 ? 0 : dh) + a] = std::exp(sign * pr[a] - mx) / z;
        }
      }
      return y;
    }
    if (map != "favor") {
      Mat y(static_cast<size_t>(n * dh));
      for (int64_t i = 0; i < n; ++i) {
        double mx = -1e300;
        for (int64_t e = 0; e < dh; ++e) mx = std::max(mx, x[i * d + col + e]);
        for (int64_t e = 0; e < dh; ++e) {
          const double v = x[i * d + col + e];
          double f;
          if (map == "elu1") f = v > 0 ? v + 1 : std::exp(v);
          else if (map == "relu") f = v > 0 ? v : 0;
          else if (map == "identity") f = v;
          else if (map == "exp") f = std::exp(v - mx);
          else throw Error("reference: no feature map " + map);
          y[i * dh + e] = f;
        }
      }
      return y;
    }
    const Mat& w = p(name + ".favor_projection");
    const int64_t m = static_cast<int64_t>(w.size()) / dh;
    const double sc = std::pow(static_cast<double>(dh), -0.25);
    Mat t(static_cast<size_t>(n * m));
    double slice_max = -1e300;
    for (int64_t i = 0; i < n; ++i) {
      double sq = 0;
      for (int64_t e = 0; e < dh; ++e) sq += sc * x[i * d + col + e] * sc * x[i * d + col + e];
      for (int64_t j = 0; j < m; ++j) {
        double h = 0;
        for (int64_t e = 0; e < dh; ++e) h += w[j * dh + e] * sc * x[i * d + col + e];
        t[i * m + j] = h - sq / 2;
        slice_max = std::max(slice_max, t[i * m + j]);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      double shift = 0;
      if (!key) {
        shift = -1e300;
        for (int64_t j = 0; j < m; ++j) shift = std::max(shift, t[i * m + j]);
      } else if (!causal) {
        shift = slice_max;
      }
      for (int64_t j = 0; j < m; ++j) t[i * m + j] = std::exp(t[i * m + j] - shift) / std::sqrt(double(m));
    }
    return t;
  }

  // Delta (and, without the erase, gated) attention on one batch row (layers/delta_rule_block.h, layers/attention/delta.h), the
  // recurrence written as kernels/delta_rule.h states it: S_t = alpha_t (I - beta_t k_t k_t^T)
  // S_{t-1} + beta_t k_t v_t^T.
  Mat delta_attention(const Mat& xq, const Mat& xkv, const std::string& name, int64_t heads, bool causal, bool cross,
                      bool erase, const std::vector<bool>& pad) const {
    return linear(delta_context(xq, xkv, name, heads, causal, cross, erase, pad), c_.d_model, name + ".out_proj");
  }

  // The same before out_proj (nq, D): what hybrid over delta mixes with its window's softmax.
  Mat delta_context(const Mat& xq, const Mat& xkv, const std::string& name, int64_t heads, bool causal, bool cross,
                    bool erase, const std::vector<bool>& pad) const {
    const int64_t d = c_.d_model, dh = d / heads;
    const int64_t nq = static_cast<int64_t>(xq.size()) / d, nk = static_cast<int64_t>(xkv.size()) / d;
    auto silu = [](double x) { return x / (1 + std::exp(-x)); };
    auto conv = [&](const Mat& x, const std::string& w_name) {
      const Mat& w = p(name + ".delta." + w_name);
      const int64_t taps = static_cast<int64_t>(w.size()) / d, n = static_cast<int64_t>(x.size()) / d;
      Mat y(x.size());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < d; ++c) {
          double s = 0;
          for (int64_t i = 0; i < taps && i <= t; ++i) s += w[i * d + c] * x[(t - i) * d + c];
          y[t * d + c] = silu(s);
        }
      return y;
    };
    Mat q = linear(xq, d, name + ".q_proj");
    if (!cross) q = conv(q, "q_conv");
    const Mat k = conv(linear(xkv, d, name + ".k_proj"), "k_conv"), v = conv(linear(xkv, d, name + ".v_proj"), "v_conv");
    const Mat b = linear(xkv, d, name + ".delta.beta_proj"), a = linear(xkv, d, name + ".delta.alpha_proj");
    const Mat g = linear(xq, d, name + ".delta.gate_proj");
    const Mat &a_log = p(name + ".delta.A_log"), &dt_bias = p(name + ".delta.dt_bias");
    const Mat& norm_w = p(name + ".delta.output_norm.weight");
    auto padded = [&](int64_t j) { return j < static_cast<int64_t>(pad.size()) && pad[j]; };
    auto unit = [&](const Mat& x, int64_t row, int64_t h) {
      std::vector<double> u(static_cast<size_t>(dh));
      double sq = 0;
      for (int64_t e = 0; e < dh; ++e) sq += x[row * d + h * dh + e] * x[row * d + h * dh + e];
      for (int64_t e = 0; e < dh; ++e) u[e] = x[row * d + h * dh + e] / std::sqrt(sq + 1e-6);
      return u;
    };
    Mat ctx(static_cast<size_t>(nq * d), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      // The state after each token of a scan over `order`, keyed by position.
      auto scan = [&](bool reverse) {
        std::vector<Mat> after(static_cast<size_t>(nk));
        Mat s(static_cast<size_t>(dh * dh), 0.0);
        for (int64_t step = 0; step < nk; ++step) {
          const int64_t j = reverse ? nk - 1 - step : step;
          const double beta = padded(j) ? 0.0 : 1 / (1 + std::exp(-b[j * heads + h]));
          const double x = a[j * heads + h] + dt_bias[h];
          const double softplus = x > 20 ? x : std::log1p(std::exp(x));
          const double alpha = padded(j) ? 1.0 : std::exp(-std::exp(a_log[h]) * softplus);
          const std::vector<double> kj = unit(k, j, h);
          Mat next(s.size());
          for (int64_t r = 0; r < dh; ++r)
            for (int64_t c = 0; c < dh; ++c) {
              double decayed = s[r * dh + c];
              for (int64_t m = 0; erase && m < dh; ++m) decayed -= beta * kj[r] * kj[m] * s[m * dh + c];
              next[r * dh + c] = alpha * decayed + beta * kj[r] * v[j * d + h * dh + c];
            }
          s = next;
          after[j] = s;
        }
        return after;
      };
      const std::vector<Mat> fwd = scan(false);
      const std::vector<Mat> rev = causal || cross ? std::vector<Mat>() : scan(true);
      for (int64_t i = 0; i < nq; ++i) {
        const std::vector<double> qi = unit(q, i, h);
        std::vector<double> o(static_cast<size_t>(dh), 0.0);
        auto read = [&](const Mat& s) {
          for (int64_t c = 0; c < dh; ++c)
            for (int64_t r = 0; r < dh; ++r) o[c] += s[r * dh + c] * qi[r];
        };
        read(cross ? fwd[nk - 1] : fwd[i]);
        if (!rev.empty()) read(rev[i]);
        double ms = 0;
        for (double x : o) ms += x * x / dh;
        for (int64_t c = 0; c < dh; ++c)
          ctx[i * d + h * dh + c] = o[c] / std::sqrt(ms + 1e-5) * norm_w[c] * silu(g[i * d + h * dh + c]);
      }
    }
    return ctx;
  }

  // Routed cross-attention (layers/attention/routed.h) on one batch row, literally: per head,
  // level 1's landmarks are the chunks' mean keys and values over their unpadded keys, and the
  // next level's the means of its chunks' nonempty landmarks, as many levels as a source of
  // max_positions needs for at most route_root at the top (1 when route_root is 0). Per query:
  // softmax over the top level's landmarks (read with their values) and its best; at each level
  // below, softmax over the children of those chosen above and their best (ties to the lower
  // index): route_top of level 1's (the keys' chunks), route_beam (0: route_top) of any level
  // above; the compressed read is the mean of the levels' reads; softmax over the keys of the
  // chunks chosen last; mixed by the gate.
  Mat routed_attention(const Mat& xq, const Mat& xkv, const std::string& name, const AttentionConfig& cfg,
                       int64_t heads, const std::vector<bool>& pad) const {
    const int64_t d = c_.d_model, dh = d / heads, c = cfg.route_chunk;
    const int64_t nq = static_cast<int64_t>(xq.size()) / d, nk = static_cast<int64_t>(xkv.size()) / d;
    const Mat q = linear(xq, d, name + ".q_proj"), k = linear(xkv, d, name + ".k_proj"), v = linear(xkv, d, name + ".v_proj");
    const Mat gate = linear(xq, d, name + ".route_gate");
    const double scaling = 1.0 / std::sqrt(static_cast<double>(dh));
    struct Level {  // rows (n, dh) of keys and values, and which are visible
      Mat k, v;
      std::vector<bool> valid;
      int64_t n() const { return static_cast<int64_t>(valid.size()); }
    };
    Mat ctx(static_cast<size_t>(nq * d), 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<Level> level(1);  // level 0: this head's keys and values
      for (int64_t j = 0; j < nk; ++j) {
        level[0].valid.push_back(!(j < (int64_t)pad.size() && pad[j]));
        for (int64_t e = 0; e < dh; ++e) {
          level[0].k.push_back(k[j * d + h * dh + e]);
          level[0].v.push_back(v[j * d + h * dh + e]);
        }
      }
      int64_t levels = 1;
      for (int64_t n = (c_.max_position_embeddings + c - 1) / c; cfg.route_root > 0 && n > cfg.route_root;
           n = (n + c - 1) / c)
        ++levels;
      do {
        const Level& below = level.back();
        Level up;
        for (int64_t m = 0; m * c < below.n(); ++m) {
          Mat lk(static_cast<size_t>(dh), 0.0), lv(lk.size(), 0.0);
          int64_t n = 0;
          for (int64_t j = m * c; j < std::min(below.n(), (m + 1) * c); ++j) {
            if (!below.valid[j]) continue;
            ++n;
            for (int64_t e = 0; e < dh; ++e) {
              lk[e] += below.k[j * dh + e];
              lv[e] += below.v[j * dh + e];
            }
          }
          for (int64_t e = 0; e < dh; ++e) {
            up.k.push_back(n > 0 ? lk[e] / n : 0.0);
            up.v.push_back(n > 0 ? lv[e] / n : 0.0);
          }
          up.valid.push_back(n > 0);
        }
        level.push_back(up);
      } while (static_cast<int64_t>(level.size()) <= levels);
      const size_t top_level = level.size() - 1;
      for (int64_t i = 0; i < nq; ++i) {
        auto score = [&](const Level& l, int64_t row) {
          double s = 0;
          for (int64_t e = 0; e < dh; ++e) s += q[i * d + h * dh + e] * scaling * l.k[row * dh + e];
          return s;
        };
        // softmax over the rows `use` allows of level l's scores -> its weighted sum of values
        auto read = [&](const Level& l, const std::vector<bool>& use) {
          std::vector<double> p(use.size(), 0.0), o(static_cast<size_t>(dh), 0.0);
          double mx = -1e300, z = 0;
          for (size_t r = 0; r < use.size(); ++r)
            if (use[r]) mx = std::max(mx, p[r] = score(l, static_cast<int64_t>(r)));
          for (size_t r = 0; r < use.size(); ++r) z += p[r] = use[r] ? std::exp(p[r] - mx) : 0.0;
          for (size_t r = 0; r < use.size() && z > 0; ++r)
            for (int64_t e = 0; e < dh; ++e) o[e] += p[r] / z * l.v[r * dh + e];
          return o;
        };
        // the best rows `use` allows of level `at`, ties to the lower row
        auto best = [&](size_t at, const std::vector<bool>& use) {
          const Level& l = level[at];
          const int64_t picks = at > 1 && cfg.route_beam > 0 ? cfg.route_beam : cfg.route_top;
          std::vector<int64_t> order;
          for (int64_t r = 0; r < l.n(); ++r)
            if (use[r]) order.push_back(r);
          std::stable_sort(order.begin(), order.end(),
                           [&](int64_t a, int64_t b) { return score(l, a) > score(l, b); });
          order.resize(std::min<size_t>(order.size(), static_cast<size_t>(picks)));
          return order;
        };
        // the visible rows of level l in the chunks `parents`
        auto children = [&](const Level& l, const std::vector<int64_t>& parents) {
          std::vector<bool> use(l.valid.size(), false);
          for (int64_t p : parents)
            for (int64_t r = p * c; r < std::min(l.n(), (p + 1) * c); ++r) use[r] = l.valid[r];
          return use;
        };
        std::vector<double> compressed = read(level[top_level], level[top_level].valid);
        std::vector<int64_t> chosen = best(top_level, level[top_level].valid);
        for (size_t l = top_level - 1; l >= 1; --l) {
          const std::vector<bool> use = children(level[l], chosen);
          const std::vector<double> r = read(level[l], use);
          for (int64_t e = 0; e < dh; ++e) compressed[e] += r[e];
          chosen = best(l, use);
        }
        const std::vector<double> selected = read(level[0], children(level[0], chosen));
        const double g = 1.0 / (1.0 + std::exp(-gate[i * heads + h]));
        for (int64_t e = 0; e < dh; ++e)
          ctx[i * d + h * dh + e] = g * selected[e] + (1 - g) * compressed[e] / static_cast<double>(top_level);
      }
    }
    return linear(ctx, d, name + ".out_proj");
  }

  // HF's BartAttention on one batch row: xq (nq, D), xkv (nk, D).
  Mat attention(const Mat& xq, const Mat& xkv, const std::string& name, const AttentionConfig& cfg, int64_t heads,
                bool causal, const std::vector<bool>& pad, bool cross = false) const {
    if (cfg.is_gated_recurrence()) return delta_attention(xq, xkv, name, heads, causal, cross, cfg.is_delta(), pad);
    if (cfg.is_routed()) return routed_attention(xq, xkv, name, cfg, heads, pad);
    const int64_t d = c_.d_model, dh = d / heads;
    const int64_t nq = static_cast<int64_t>(xq.size()) / d, nk = static_cast<int64_t>(xkv.size()) / d;
    Mat q = linear(xq, d, name + ".q_proj"), k = linear(xkv, d, name + ".k_proj"), v = linear(xkv, d, name + ".v_proj");
    Mat ctx(static_cast<size_t>(nq * d));
    auto allowed = [&](int64_t i, int64_t j) { return !(causal && j > i) && !(j < (int64_t)pad.size() && pad[j]); };
    // Hybrid's window: causal, i - window < j; bidirectional, |i - j| <= window / 2.
    auto in_window = [&](int64_t i, int64_t j) {
      if (!cfg.is_hybrid()) return true;
      return causal ? j > i - cfg.window : std::abs(i - j) <= cfg.window / 2;
    };
    // Hybrid's gate per position and head: sigmoid(x_i . W_g[h] + b_g[h]).
    const Mat gate = cfg.is_hybrid() ? linear(xq, d, name + ".hybrid_gate") : Mat();
    // align_gate's per position and head: g aligned + (1 - g) plain, both normalised on their own.
    const Mat align_gate = cfg.is_gated_aligned() ? linear(xq, d, name + ".align_gate") : Mat();
    // Hybrid over delta or gated: the global part is that layer's output before out_proj.
    const Mat global = cfg.is_hybrid() && cfg.has_delta_block()
                           ? delta_context(xq, xkv, name, heads, causal, cross, cfg.erases(), pad)
                           : Mat();
    for (int64_t h = 0; h < heads; ++h) {
      Mat fq, fk;
      int64_t f = dh;
      if (cfg.uses_feature_map()) {
        fq = features(q, nq, h * dh, dh, cfg, false, causal, name);
        fk = features(k, nk, h * dh, dh, cfg, true, causal, name);
        f = static_cast<int64_t>(fq.size()) / nq;
      }
      for (int64_t i = 0; i < nq; ++i) {
        std::vector<double> w(static_cast<size_t>(nk), 0.0), lw(static_cast<size_t>(nk), 0.0);
        if (!cfg.is_linear()) {
          const double scaling = 1.0 / std::sqrt(static_cast<double>(dh));
          double mx = -1e300;
          for (int64_t j = 0; j < nk; ++j) {
            if (!allowed(i, j) || !in_window(i, j)) continue;
            double s = 0;
            for (int64_t e = 0; e < dh; ++e) s += q[i * d + h * dh + e] * scaling * k[j * d + h * dh + e];
            w[j] = s;
            mx = std::max(mx, s);
          }
          double z = 0;
          for (int64_t j = 0; j < nk; ++j) {
            w[j] = allowed(i, j) && in_window(i, j) ? std::exp(w[j] - mx) : 0.0;
            z += w[j];
          }
          // A query whose window holds only padding sees no key: zeros, as the kernels give.
          if (z > 0)
            for (double& x : w) x /= z;
        }
        if (cfg.uses_feature_map()) {
          // out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / (Σ_j φ(q_i)·φ(k_j) + eps)   (docs/design.md section 2)
          double den = 0, plain_den = 0;
          std::vector<double> plain(static_cast<size_t>(nk), 0.0);
          for (int64_t j = 0; j < nk; ++j) {
            if (!allowed(i, j)) continue;
            double s = 0;
            for (int64_t e = 0; e < f; ++e) s += fq[i * f + e] * fk[j * f + e];
            plain[j] = s;
            plain_den += s;
            // align_decay: head 0 weighs every position alike; head h >= 1 decays by
            // max(1e-3, align_decay^(2^(h-1))) a position of |i - j|.
            if (cfg.align_decay > 0 && h > 0)
              s *= std::pow(std::max(1e-3, std::pow(cfg.align_decay, std::pow(2.0, h - 1))), std::abs(i - j));
            lw[j] = s;
            den += s;
          }
          for (double& x : lw) x /= (den + cfg.eps);
          if (cfg.is_gated_aligned()) {
            const double ga = 1.0 / (1.0 + std::exp(-align_gate[i * heads + h]));
            for (int64_t j = 0; j < nk; ++j) lw[j] = ga * lw[j] + (1 - ga) * plain[j] / (plain_den + cfg.eps);
          }
        }
        if (cfg.is_linear()) w = lw;
        const double g = cfg.is_hybrid() ? 1.0 / (1.0 + std::exp(-gate[i * heads + h])) : 1.0;
        if (cfg.uses_feature_map() && cfg.is_hybrid()) {  // g softmax + (1 - g) linear: weighted sums of the same v
          for (int64_t j = 0; j < nk; ++j) w[j] = g * w[j] + (1 - g) * lw[j];
        }
        for (int64_t e = 0; e < dh; ++e) {
          double s = 0;
          for (int64_t j = 0; j < nk; ++j) s += w[j] * v[j * d + h * dh + e];
          ctx[i * d + h * dh + e] = global.empty() ? s : g * s + (1 - g) * global[i * d + h * dh + e];
        }
      }
    }
    return linear(ctx, d, name + ".out_proj");
  }

  static Mat add(const Mat& a, const Mat& b) {
    Mat y(a.size());
    for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
    return y;
  }

  Mat feed_forward(const Mat& h, const std::string& name, int64_t ffn) const {
    Mat f = linear(h, c_.d_model, name + ".fc1");
    for (double& x : f) x = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    return layer_norm(add(h, linear(f, ffn, name + ".fc2")), name + ".final_layer_norm");
  }

  Mat encoder(const std::vector<int32_t>& ids, const std::vector<bool>& pad) const {
    Mat x = embed(ids, "encoder");
    for (int64_t l = 0; l < c_.encoder_layers; ++l) {
      const std::string name = "model.encoder.layers." + std::to_string(l);
      const Mat a = attention(x, x, name + ".self_attn", c_.encoder_self_attention_of(l), c_.heads,
                              false, pad);
      const Mat h = layer_norm(add(x, a), name + ".self_attn_layer_norm");
      x = feed_forward(h, name, c_.ffn_dim);
    }
    return x;
  }

  Mat decoder(const std::vector<int32_t>& ids, const Mat& enc, int64_t s_len, const std::vector<bool>& src_pad) const {
    Mat x = embed(ids, "decoder");
    for (int64_t l = 0; l < c_.decoder_layers; ++l) {
      const std::string name = "model.decoder.layers." + std::to_string(l);
      const Mat a = attention(x, x, name + ".self_attn", c_.decoder_self_attention_of(l), c_.heads, true,
                              {});
      Mat h = layer_norm(add(x, a), name + ".self_attn_layer_norm");
      const Mat c = attention(h, enc, name + ".encoder_attn", c_.cross_attention_of(l), c_.heads, false,
                              src_pad, /*cross=*/true);
      h = layer_norm(add(h, c), name + ".encoder_attn_layer_norm");
      x = feed_forward(h, name, c_.ffn_dim);
    }
    return x;
  }

  BartConfig c_;
  std::map<std::string, Mat> params_;
};

}  // namespace tarn::testing
