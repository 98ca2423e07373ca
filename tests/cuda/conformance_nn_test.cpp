// CUDA softmax, cross-entropy, layer norm, GELU, dropout and embedding kernels against the CPU
// kernels, forward and backward, on shapes that are no multiple of any tile, under every
// emulated thread order and on a GPU when there is one.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/dropout.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layer_norm.h"
#include "kernels/rms_norm.h"
#include "kernels/softmax.h"
#include "tests/cuda/conformance_util.h"
#include "tests/cuda/tolerance.h"

namespace tarn::cuda_testing {
namespace {

constexpr int64_t kRows = 37, kCols = 129;

class NnConformance : public Conformance {};

// Each kernel's formula, as kernels/cuda/*.cu and kernels/cpu/*.cpp write it, evaluated for one
// side's Rounding (tests/cuda/tolerance.h): the exact value and that side's error bound. The
// CPU's double sums are within the f32 bound used for every sum here.

// softmax: exp(x - max) times 1 / sum; log-softmax: x - (max + log sum).
std::vector<Bounded> Softmax(const Rounding& side, const std::vector<float>& x, int64_t rows, int64_t cols, bool log) {
  std::vector<Bounded> y;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const double m = *std::max_element(xr, xr + cols);
    std::vector<Bounded> e(cols);
    for (int64_t c = 0; c < cols; ++c) e[c] = Exp(Exact(side, xr[c]) - m);
    const Bounded sum = Sum(e), shift = m + Log(sum), inv = 1.0 / sum;
    for (int64_t c = 0; c < cols; ++c) y.push_back(log ? Exact(side, xr[c]) - shift : e[c] * inv);
  }
  return y;
}

// softmax: y (dy - sum y dy); log-softmax: dy - exp(y) sum dy; from the CPU's y.
std::vector<Bounded> SoftmaxBackward(const Rounding& side, const std::vector<float>& y, const std::vector<float>& dy,
                                     int64_t rows, int64_t cols, bool log) {
  std::vector<Bounded> dx;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<Bounded> yr(cols), gr(cols), terms(cols);
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = Exact(side, y[r * cols + c]), gr[c] = Exact(side, dy[r * cols + c]);
      terms[c] = log ? gr[c] : yr[c] * gr[c];
    }
    const Bounded sum = Sum(terms);
    for (int64_t c = 0; c < cols; ++c) dx.push_back(log ? gr[c] - Exp(yr[c]) * sum : yr[c] * (gr[c] - sum));
  }
  return dx;
}

// Cross entropy (kernels/cuda/cross_entropy.cu, kernels/cpu/cross_entropy.cpp): per row
// lse = max + log sum exp(x - max) in f32, then in double nll = lse - x_t and the row loss
// (1 - eps) nll + eps (lse - sum x / V), summed over the counted rows. One side's bounds.
struct CrossEntropyBound {
  std::vector<Bounded> lse;
  double loss = 0, nll = 0;
};

CrossEntropyBound CrossEntropy(const Rounding& side, const std::vector<float>& x, const std::vector<int32_t>& targets,
                               int64_t rows, int64_t vocab, int32_t ignore, float smoothing) {
  CrossEntropyBound b;
  double loss_mag = 0, nll_mag = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * vocab;
    const double m = *std::max_element(xr, xr + vocab);
    std::vector<Bounded> e(vocab), xs(vocab);
    for (int64_t c = 0; c < vocab; ++c) xs[c] = Exact(side, xr[c]), e[c] = Exp(xs[c] - m);
    const Bounded lse = m + Log(Sum(e));
    b.lse.push_back(lse);
    if (targets[r] == ignore) continue;
    const Bounded sx = Sum(xs);
    const double nll = lse.v - xr[targets[r]];
    b.nll += lse.err;
    b.loss += (1 - smoothing) * lse.err + smoothing * (lse.err + sx.err / vocab);
    nll_mag += std::fabs(nll);
    loss_mag += (1 - smoothing) * std::fabs(nll) + smoothing * (std::fabs(lse.v) + std::fabs(sx.v) / vocab);
    ++count;
  }
  // The double arithmetic: a few roundings per row and the sum over rows.
  b.loss += Gamma(count + 4, kF64) * loss_mag;
  b.nll += Gamma(count + 1, kF64) * nll_mag;
  return b;
}

// dlogits = scale (exp(x - lse) - eps / V), minus scale (1 - eps) at the target; from the
// CPU's lse.
std::vector<Bounded> CrossEntropyBackward(const Rounding& side, const std::vector<float>& x,
                                          const std::vector<int32_t>& targets, const std::vector<float>& lse,
                                          int64_t rows, int64_t vocab, int32_t ignore, float smoothing, float scale) {
  const float uniform = smoothing / static_cast<float>(vocab);
  std::vector<Bounded> d;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < vocab; ++c) {
      if (targets[r] == ignore) {
        d.push_back(Exact(side, 0.0));
        continue;
      }
      Bounded v = Exact(side, scale) * (Exp(Exact(side, x[r * vocab + c]) - lse[r]) - uniform);
      if (c == targets[r]) v = v - Exact(side, scale) * (1.0f - smoothing);
      d.push_back(v);
    }
  return d;
}

// Layer norm (kernels/cuda/layer_norm.cu, kernels/cpu/layer_norm.cpp): m = sum x / n,
// rstd = 1 / sqrt(sum (x - m)^2 / n + eps), y = (x - m) rstd gamma + beta; backward from the
// CPU's mean and rstd: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, and the column
// sums dgamma = sum dy xhat, dbeta = sum dy. 1 / n is the same float on both sides.
struct LayerNormBound {
  std::vector<Bounded> y, mean, rstd, dx, dg, db;
};

LayerNormBound LayerNorm(const Rounding& side, const std::vector<float>& x, const std::vector<float>& dy,
                         const float* gamma, const float* beta, const std::vector<float>& mean,
                         const std::vector<float>& rstd, int64_t rows, int64_t cols, float eps) {
  const double inv = 1.0f / static_cast<float>(cols);
  LayerNormBound b;
  std::vector<std::vector<Bounded>> dg(cols), db(cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<Bounded> xs(cols), sq(cols), g(cols), gx(cols);
    for (int64_t c = 0; c < cols; ++c) xs[c] = Exact(side, x[r * cols + c]);
    const Bounded m = Sum(xs) * inv;
    for (int64_t c = 0; c < cols; ++c) sq[c] = (xs[c] - m) * (xs[c] - m);
    const Bounded rs = 1.0 / Sqrt(Sum(sq) * inv + eps);
    b.mean.push_back(m), b.rstd.push_back(rs);
    for (int64_t c = 0; c < cols; ++c) {
      Bounded yc = (xs[c] - m) * rs;
      if (gamma) yc = yc * gamma[c] + beta[c];
      b.y.push_back(yc);
    }
    // Backward from the given mean and rstd.
    const double mr = mean[r], rsr = rstd[r];
    for (int64_t c = 0; c < cols; ++c) {
      const Bounded dyc = Exact(side, dy[r * cols + c]);
      const Bounded xhat = (xs[c] - mr) * rsr;
      g[c] = gamma ? dyc * gamma[c] : dyc;
      gx[c] = g[c] * xhat;
      dg[c].push_back(dyc * xhat);
      db[c].push_back(dyc);
    }
    const Bounded mean_g = Sum(g) * inv, mean_gx = Sum(gx) * inv;
    for (int64_t c = 0; c < cols; ++c)
      b.dx.push_back(rsr * (g[c] - mean_g - (xs[c] - mr) * rsr * mean_gx));
  }
  for (int64_t c = 0; c < cols; ++c) b.dg.push_back(Sum(dg[c])), b.db.push_back(Sum(db[c]));
  return b;
}

// RMS norm (kernels/cuda/rms_norm.cu, kernels/cpu/rms_norm.cpp): rstd = 1 / sqrt(sum x^2 / divisor
// + eps), y = x rstd gamma; backward from the CPU's rstd: dx = rstd g - x rstd^3 (sum g x) / divisor,
// g = dy gamma, and the column sums dgamma = sum dy x rstd. The CPU sums x^2 in double: its bound
// is the f32 one's, an over-estimate.
struct RmsNormBound {
  std::vector<Bounded> y, rstd, dx, dg;
};

RmsNormBound RmsNorm(const Rounding& side, const std::vector<float>& x, const std::vector<float>& dy,
                     const float* gamma, const std::vector<float>& rstd, int64_t rows, int64_t cols, float divisor,
                     float eps) {
  RmsNormBound b;
  std::vector<std::vector<Bounded>> dg(cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<Bounded> xs(cols), sq(cols), gx(cols);
    for (int64_t c = 0; c < cols; ++c) xs[c] = Exact(side, x[r * cols + c]), sq[c] = xs[c] * xs[c];
    const Bounded rs = 1.0 / Sqrt(Sum(sq) / divisor + eps);
    b.rstd.push_back(rs);
    for (int64_t c = 0; c < cols; ++c) b.y.push_back(gamma ? xs[c] * rs * gamma[c] : xs[c] * rs);
    const double rsr = rstd[r];
    std::vector<Bounded> g(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const Bounded dyc = Exact(side, dy[r * cols + c]);
      g[c] = gamma ? dyc * gamma[c] : dyc;
      gx[c] = g[c] * xs[c];
      dg[c].push_back(dyc * xs[c] * rsr);
    }
    const Bounded k = Exact(side, rsr) * rsr * rsr * Sum(gx) / divisor;
    for (int64_t c = 0; c < cols; ++c) b.dx.push_back(g[c] * rsr - xs[c] * k);
  }
  for (int64_t c = 0; c < cols; ++c) b.dg.push_back(Sum(dg[c]));
  return b;
}

// GELU, exact: 0.5 x (1 + erf(x / sqrt 2)), and its derivative cdf + x pdf (both sides);
// tanh form: 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3) on the device, the CPU's
// x / (1 + exp(-2 u)) (kernels/cpu/gelu.cpp). Times dy for the backward.
void Gelu(const Rounding& side, bool cpu, kernels::cpu::Gelu kind, float xf, float dyf, Bounded& y, Bounded& dx) {
  constexpr double kSqrtHalf = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f,
                   kSqrt2OverPi = 0.79788456080286536f, kCubic = 0.044715f, kCubic3 = 3.0f * 0.044715f;
  const Bounded x = Exact(side, xf), dy = Exact(side, dyf);
  if (kind == kernels::cpu::Gelu::exact) {
    y = 0.5 * x * (1.0 + Erf(x * kSqrtHalf));
    const Bounded cdf = 0.5 * (1.0 + Erf(x * kSqrtHalf)), pdf = kInvSqrt2Pi * Exp(-0.5 * x * x);
    dx = dy * (cdf + x * pdf);
    return;
  }
  const Bounded u = kSqrt2OverPi * (x + kCubic * x * x * x), du = kSqrt2OverPi * (1.0 + kCubic3 * x * x);
  if (cpu) {
    y = x / (1.0 + Exp(-2.0 * u));
    const Bounded e = Exp(-2.0 * u), sig = 1.0 / (1.0 + e);  // the exponent's cap at 80 is not reached here
    dx = dy * (sig + 2.0 * x * (e * sig) * sig * du);
  } else {
    const Bounded t = Tanh(u);
    y = 0.5 * x * (1.0 + t);
    dx = dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du);
  }
}

TEST_P(NnConformance, SoftmaxAndLogSoftmaxForwardAndBackwardMatchCpu) {
  for (int64_t cols : {int64_t{1}, kCols, int64_t{1000}}) {
    const int64_t n = kRows * cols;
    auto x = Random(n, -8.0f, 8.0f, 100);
    x[3 % n] = 60.0f;  // a large logit: the max shift must hold
    const auto dy = Random(n, -1.0f, 1.0f, 101);
    auto dx_in = dev(x), ddy = dev(dy);
    for (bool log : {false, true}) {
      std::vector<float> want_y(n), want_dx(n);
      if (log) {
        kernels::cpu::log_softmax_forward(x.data(), want_y.data(), kRows, cols);
        kernels::cpu::log_softmax_backward(want_y.data(), dy.data(), want_dx.data(), kRows, cols);
      } else {
        kernels::cpu::softmax_forward(x.data(), want_y.data(), kRows, cols);
        kernels::cpu::softmax_backward(want_y.data(), dy.data(), want_dx.data(), kRows, cols);
      }
      auto y = out(n);
      if (log)
        TARN_ON(target(), log_softmax_forward, dx_in.get(), y.get(), kRows, cols);
      else
        TARN_ON(target(), softmax_forward, dx_in.get(), y.get(), kRows, cols);
      // Per side: exp's ulps and the rounding of x - max, the sum over cols, the division (or
      // max + log sum and the subtraction).
      EXPECT_TRUE(WithinBound(y.host(), want_y,
                              Plus(Errors(Softmax(kCudaF32, x, kRows, cols, log)),
                                   Errors(Softmax(kCpuF32, x, kRows, cols, log)))))
          << "forward, log " << log << ", cols " << cols;
      auto dy_ref = dev(want_y);
      auto dx = out(n);
      if (log)
        TARN_ON(target(), log_softmax_backward, dy_ref.get(), ddy.get(), dx.get(), kRows, cols);
      else
        TARN_ON(target(), softmax_backward, dy_ref.get(), ddy.get(), dx.get(), kRows, cols);
      // Per side: the cols-term sum, the product and difference (and exp for log-softmax).
      EXPECT_TRUE(WithinBound(dx.host(), want_dx,
                              Plus(Errors(SoftmaxBackward(kCudaF32, want_y, dy, kRows, cols, log)),
                                   Errors(SoftmaxBackward(kCpuF32, want_y, dy, kRows, cols, log)))))
          << "backward, log " << log << ", cols " << cols;
    }
  }
}

// The forms that read nothing back (kernels/cross_entropy.h): the totals and the mean written
// where the logits are, on the same target as the returning forward (the mean is the loss over
// the count, rounded to f32, and 0 when nothing counts), and the mean's backward reading dy
// there gives the bits of the backward with scale = dy / count.
TEST_P(NnConformance, CrossEntropyTotalsAndTheMeansBackwardReadNothingBack) {
  const int32_t ignore = -100;
  const int64_t vocab = 1031;
  const auto logits = Random(kRows * vocab, -6.0f, 6.0f, 112);
  auto targets = RandomIds(kRows, static_cast<int32_t>(vocab), 113);
  for (int64_t r = 0; r < kRows; r += 3) targets[r] = ignore;
  auto dl = dev(logits);
  auto dt = dev(targets);
  auto lse = out(kRows);
  auto mean = out(1);
  auto totals = dev(std::vector<kernels::cpu::CrossEntropyTotals>(1));
  TARN_ON(target(), cross_entropy_forward_totals, dl.get(), dt.get(), kRows, vocab, ignore, 0.1f, lse.get(), mean.get(),
          totals.get());
  auto lse2 = out(kRows);
  const auto returned = TARN_ON(target(), cross_entropy_forward, dl.get(), dt.get(), kRows, vocab, ignore, 0.1f,
                                lse2.get());
  const kernels::cpu::CrossEntropyTotals t = totals.host()[0];
  EXPECT_EQ(t.count, returned.count);
  EXPECT_EQ(t.loss, returned.loss);
  EXPECT_EQ(t.nll, returned.nll);
  EXPECT_EQ(mean.host()[0], static_cast<float>(t.loss / static_cast<double>(t.count)));
  EXPECT_TRUE(BitwiseEqual(lse.host(), lse2.host()));

  const float dy = 0.8125f;
  auto ddy = dev(std::vector<float>{dy});
  auto d_mean = out(static_cast<size_t>(kRows * vocab)), d_scale = out(static_cast<size_t>(kRows * vocab));
  TARN_ON(target(), cross_entropy_backward_mean, dl.get(), dt.get(), lse.get(), kRows, vocab, ignore, 0.1f, ddy.get(),
          t.count, d_mean.get());
  TARN_ON(target(), cross_entropy_backward, dl.get(), dt.get(), lse.get(), kRows, vocab, ignore, 0.1f,
          dy / static_cast<float>(t.count), d_scale.get());
  EXPECT_TRUE(BitwiseEqual(d_mean.host(), d_scale.host()));

  std::vector<int32_t> all_ignored(kRows, ignore);
  auto di = dev(all_ignored);
  TARN_ON(target(), cross_entropy_forward_totals, dl.get(), di.get(), kRows, vocab, ignore, 0.0f, lse.get(), mean.get(),
          totals.get());
  EXPECT_EQ(mean.host()[0], 0.0f) << "the mean of nothing is 0";
  EXPECT_EQ(totals.host()[0].count, 0);
  TARN_ON(target(), cross_entropy_backward_mean, dl.get(), di.get(), lse.get(), kRows, vocab, ignore, 0.0f, ddy.get(),
          int64_t{0}, d_mean.get());
  EXPECT_TRUE(BitwiseEqual(d_mean.host(), std::vector<float>(static_cast<size_t>(kRows * vocab), 0.0f)));
}

TEST_P(NnConformance, CrossEntropyWithIgnoreIndexAndSmoothingMatchesCpu) {
  const int32_t ignore = -100;
  for (int64_t vocab : {kCols, int64_t{1031}}) {
    for (float smoothing : {0.0f, 0.1f}) {
      const auto logits = Random(kRows * vocab, -6.0f, 6.0f, 110);
      auto targets = RandomIds(kRows, static_cast<int32_t>(vocab), 111);
      for (int64_t r = 0; r < kRows; r += 5) targets[r] = ignore;
      std::vector<float> want_lse(kRows);
      const auto want = kernels::cpu::cross_entropy_forward(logits.data(), targets.data(), kRows, vocab, ignore,
                                                            smoothing, want_lse.data());
      auto dl = dev(logits);
      auto dt = dev(targets);
      auto lse = out(kRows);
      const auto got = TARN_ON(target(), cross_entropy_forward, dl.get(), dt.get(), kRows, vocab, ignore, smoothing,
                               lse.get());
      EXPECT_EQ(got.count, want.count);
      // Per side: lse's exp and log ulps, the vocab-term sums and the roundings of max + log
      // (each row's lse carries to its nll and loss), then the double sums over rows.
      const CrossEntropyBound dev_bound = CrossEntropy(kCudaF32, logits, targets, kRows, vocab, ignore, smoothing);
      const CrossEntropyBound cpu_bound = CrossEntropy(kCpuF32, logits, targets, kRows, vocab, ignore, smoothing);
      EXPECT_TRUE(WithinBound(got.loss, want.loss, dev_bound.loss + cpu_bound.loss))
          << "vocab " << vocab << " eps " << smoothing;
      EXPECT_TRUE(WithinBound(got.nll, want.nll, dev_bound.nll + cpu_bound.nll))
          << "vocab " << vocab << " eps " << smoothing;
      EXPECT_TRUE(WithinBound(lse.host(), want_lse, Plus(Errors(dev_bound.lse), Errors(cpu_bound.lse))));
      const float scale = 1.0f / static_cast<float>(want.count);
      std::vector<float> want_d(kRows * vocab);
      kernels::cpu::cross_entropy_backward(logits.data(), targets.data(), want_lse.data(), kRows, vocab, ignore,
                                           smoothing, scale, want_d.data());
      auto lse_ref = dev(want_lse);
      auto d = out(want_d.size());
      TARN_ON(target(), cross_entropy_backward, dl.get(), dt.get(), lse_ref.get(), kRows, vocab, ignore, smoothing,
              scale, d.get());
      // Per side: exp's ulps and the rounding of x - lse, the subtraction and the products.
      auto backward_bound = [&](const Rounding& side) {
        return Errors(CrossEntropyBackward(side, logits, targets, want_lse, kRows, vocab, ignore, smoothing, scale));
      };
      EXPECT_TRUE(WithinBound(d.host(), want_d, Plus(backward_bound(kCudaF32), backward_bound(kCpuF32))))
          << "vocab " << vocab << " eps " << smoothing;
    }
  }
}

TEST_P(NnConformance, LayerNormForwardAndBackwardMatchCpu) {
  struct Case {
    int64_t rows, cols;
    bool affine;
  };
  // 200 rows: several 64-row partial blocks for dgamma/dbeta.
  const Case cases[] = {{kRows, kCols, true}, {200, 33, true}, {kRows, kCols, false}, {3, 1000, true}};
  int index = 0;
  for (const Case& c : cases) {
    const int64_t n = c.rows * c.cols;
    const auto x = Random(n, -3.0f, 5.0f, 120 + index);
    const auto dy = Random(n, -1.0f, 1.0f, 130 + index);
    const auto gamma = Random(c.cols, 0.5f, 1.5f, 140 + index);
    const auto beta = Random(c.cols, -0.5f, 0.5f, 150 + index);
    const float* g = c.affine ? gamma.data() : nullptr;
    const float* b = c.affine ? beta.data() : nullptr;
    std::vector<float> want_y(n), want_mean(c.rows), want_rstd(c.rows), want_dx(n), want_dg(c.cols),
        want_db(c.cols);
    kernels::cpu::layer_norm_forward(x.data(), g, b, want_y.data(), want_mean.data(), want_rstd.data(), c.rows,
                                     c.cols, 1e-5f);
    kernels::cpu::layer_norm_backward(x.data(), dy.data(), g, want_mean.data(), want_rstd.data(), want_dx.data(),
                                      want_dg.data(), want_db.data(), c.rows, c.cols);
    auto dx_in = dev(x), ddy = dev(dy), dgam = dev(gamma), dbet = dev(beta);
    auto y = out(n), mean = out(c.rows), rstd = out(c.rows);
    TARN_ON(target(), layer_norm_forward, dx_in.get(), c.affine ? dgam.get() : nullptr,
            c.affine ? dbet.get() : nullptr, y.get(), mean.get(), rstd.get(), c.rows, c.cols, 1e-5f);
    // Per side: the row sums over cols (gamma_{cols-1}), the roundings of each formula above,
    // and the mean's and rstd's errors carried into y (and the backward's sums over rows).
    const LayerNormBound dev_bound = LayerNorm(kCudaF32, x, dy, g, b, want_mean, want_rstd, c.rows, c.cols, 1e-5f);
    const LayerNormBound cpu_bound = LayerNorm(kCpuF32, x, dy, g, b, want_mean, want_rstd, c.rows, c.cols, 1e-5f);
    auto bound = [&](std::vector<Bounded> LayerNormBound::*field) {
      return Plus(Errors(dev_bound.*field), Errors(cpu_bound.*field));
    };
    EXPECT_TRUE(WithinBound(y.host(), want_y, bound(&LayerNormBound::y))) << "case " << index;
    EXPECT_TRUE(WithinBound(mean.host(), want_mean, bound(&LayerNormBound::mean))) << "case " << index;
    EXPECT_TRUE(WithinBound(rstd.host(), want_rstd, bound(&LayerNormBound::rstd))) << "case " << index;
    auto mean_ref = dev(want_mean), rstd_ref = dev(want_rstd);
    auto dx = out(n), dg = out(c.cols), db = out(c.cols);
    TARN_ON(target(), layer_norm_backward, dx_in.get(), ddy.get(), c.affine ? dgam.get() : nullptr, mean_ref.get(),
            rstd_ref.get(), dx.get(), dg.get(), db.get(), c.rows, c.cols);
    EXPECT_TRUE(WithinBound(dx.host(), want_dx, bound(&LayerNormBound::dx))) << "case " << index;
    EXPECT_TRUE(WithinBound(dg.host(), want_dg, bound(&LayerNormBound::dg))) << "case " << index;
    EXPECT_TRUE(WithinBound(db.host(), want_db, bound(&LayerNormBound::db))) << "case " << index;
    // Each output alone (the others null) gives the same values.
    auto dg_only = out(c.cols);
    TARN_ON(target(), layer_norm_backward, dx_in.get(), ddy.get(), c.affine ? dgam.get() : nullptr, mean_ref.get(),
            rstd_ref.get(), nullptr, dg_only.get(), nullptr, c.rows, c.cols);
    EXPECT_TRUE(BitwiseEqual(dg_only.host(), dg.host())) << "case " << index;
    ++index;
  }
}

TEST_P(NnConformance, RmsNormForwardAndBackwardMatchCpu) {
  struct Case {
    int64_t rows, cols;
    bool rms;  // divisor cols with gamma (RMSNorm), or divisor 1 without (unit rows)
  };
  const Case cases[] = {{kRows, kCols, true}, {200, 64, true}, {200, 64, false}, {3, 1000, false}};
  int index = 0;
  for (const Case& c : cases) {
    const int64_t n = c.rows * c.cols;
    const float divisor = c.rms ? static_cast<float>(c.cols) : 1.0f, eps = 1e-6f;
    const auto x = Random(n, -3.0f, 5.0f, 220 + index);
    const auto dy = Random(n, -1.0f, 1.0f, 230 + index);
    const auto gamma = Random(c.cols, 0.5f, 1.5f, 240 + index);
    const float* g = c.rms ? gamma.data() : nullptr;
    std::vector<float> want_y(n), want_rstd(c.rows), want_dx(n), want_dg(c.cols);
    kernels::cpu::rms_norm_forward(x.data(), g, want_y.data(), want_rstd.data(), c.rows, c.cols, divisor, eps);
    kernels::cpu::rms_norm_backward(x.data(), dy.data(), g, want_rstd.data(), want_dx.data(), want_dg.data(), c.rows,
                                    c.cols, divisor);
    auto dx_in = dev(x), ddy = dev(dy), dgam = dev(gamma);
    auto y = out(n), rstd = out(c.rows);
    TARN_ON(target(), rms_norm_forward, dx_in.get(), c.rms ? dgam.get() : nullptr, y.get(), rstd.get(), c.rows,
            c.cols, divisor, eps);
    const RmsNormBound dev_bound = RmsNorm(kCudaF32, x, dy, g, want_rstd, c.rows, c.cols, divisor, eps);
    const RmsNormBound cpu_bound = RmsNorm(kCpuF32, x, dy, g, want_rstd, c.rows, c.cols, divisor, eps);
    auto bound = [&](std::vector<Bounded> RmsNormBound::*field) {
      return Plus(Errors(dev_bound.*field), Errors(cpu_bound.*field));
    };
    EXPECT_TRUE(WithinBound(y.host(), want_y, bound(&RmsNormBound::y))) << "case " << index;
    EXPECT_TRUE(WithinBound(rstd.host(), want_rstd, bound(&RmsNormBound::rstd))) << "case " << index;
    auto rstd_ref = dev(want_rstd);
    auto dx = out(n), dg = out(c.cols);
    TARN_ON(target(), rms_norm_backward, dx_in.get(), ddy.get(), c.rms ? dgam.get() : nullptr, rstd_ref.get(),
            dx.get(), dg.get(), c.rows, c.cols, divisor);
    EXPECT_TRUE(WithinBound(dx.host(), want_dx, bound(&RmsNormBound::dx))) << "case " << index;
    EXPECT_TRUE(WithinBound(dg.host(), want_dg, bound(&RmsNormBound::dg))) << "case " << index;
    ++index;
  }
}

TEST_P(NnConformance, GeluExactAndTanhMatchCpu) {
  const int64_t n = kRows * kCols;
  const auto x = Random(n, -6.0f, 6.0f, 160);
  const auto dy = Random(n, -1.0f, 1.0f, 161);
  auto dx_in = dev(x), ddy = dev(dy);
  for (auto kind : {kernels::cpu::Gelu::exact, kernels::cpu::Gelu::tanh}) {
    std::vector<float> want_y(n), want_dx(n);
    kernels::cpu::gelu_forward(kind, x.data(), want_y.data(), n);
    kernels::cpu::gelu_backward(kind, x.data(), dy.data(), want_dx.data(), n);
    auto y = out(n), dx = out(n);
    TARN_ON(target(), gelu_forward, kind, dx_in.get(), y.get(), n);
    TARN_ON(target(), gelu_backward, kind, dx_in.get(), ddy.get(), dx.get(), n);
    // Per side: erf's (or tanh's, exp's) error and every rounding of its formula, carried
    // through the products; the CPU's tanh form is another formula with its own bound.
    std::vector<double> bound_y(n), bound_dx(n);
    for (int64_t i = 0; i < n; ++i)
      for (bool cpu : {false, true}) {
        Bounded yi, dxi;
        Gelu(cpu ? kCpuF32 : kCudaF32, cpu, kind, x[i], dy[i], yi, dxi);
        bound_y[i] += yi.err, bound_dx[i] += dxi.err;
      }
    EXPECT_TRUE(WithinBound(y.host(), want_y, bound_y)) << "kind " << static_cast<int>(kind);
    EXPECT_TRUE(WithinBound(dx.host(), want_dx, bound_dx)) << "kind " << static_cast<int>(kind);
  }
}

TEST_P(NnConformance, DropoutMaskIsTheCpuMaskBitForBit) {
  const int64_t n = kRows * kCols;  // not a multiple of 4: a partial last Philox block
  const auto x = Random(n, -2.0f, 2.0f, 170);
  auto dx_in = dev(x);
  struct Case {
    float p;
    uint64_t seed, stream;
  };
  const Case cases[] = {{0.1f, 42, 0}, {0.5f, 0x123456789abcdefULL, 0xfedcba987654321ULL}, {0.0f, 1, 2}, {1.0f, 3, 4}};
  for (const Case& c : cases) {
    std::vector<float> want(n);
    kernels::cpu::dropout_apply(x.data(), want.data(), n, c.p, c.seed, c.stream);
    auto y = out(n);
    TARN_ON(target(), dropout_apply, dx_in.get(), y.get(), n, c.p, c.seed, c.stream);
    EXPECT_TRUE(BitwiseEqual(y.host(), want)) << "p " << c.p;
  }
}

TEST_P(NnConformance, EmbeddingForwardAndDeterministicBackwardAreTheCpuBits) {
  struct Case {
    int64_t n, vocab, dim;
  };
  // 1500 positions: the sort takes a global-memory step; vocab 50: many repeated ids.
  const Case cases[] = {{kRows, 1000, kCols}, {1500, 50, kCols}, {2, 7, 3}, {5000, 3, 17}};
  int index = 0;
  for (const Case& c : cases) {
    const auto weight = Random(c.vocab * c.dim, -1.0f, 1.0f, 180 + index);
    const auto dy = Random(c.n * c.dim, -1.0f, 1.0f, 190 + index);
    const auto ids = RandomIds(c.n, static_cast<int32_t>(c.vocab), 200 + index);
    std::vector<float> want_out(c.n * c.dim), want_dw(c.vocab * c.dim);
    kernels::cpu::embedding_forward(weight.data(), ids.data(), want_out.data(), c.n, c.vocab, c.dim);
    kernels::cpu::embedding_backward(dy.data(), ids.data(), want_dw.data(), c.n, c.vocab, c.dim);
    auto dw_in = dev(weight), ddy = dev(dy);
    auto dids = dev(ids);
    auto o = out(want_out.size()), dw = out(want_dw.size());
    TARN_ON(target(), embedding_forward, dw_in.get(), dids.get(), o.get(), c.n, c.vocab, c.dim);
    TARN_ON(target(), embedding_backward, ddy.get(), dids.get(), dw.get(), c.n, c.vocab, c.dim);
    EXPECT_TRUE(BitwiseEqual(o.host(), want_out)) << "case " << index;
    EXPECT_TRUE(BitwiseEqual(dw.host(), want_dw)) << "case " << index;
    ++index;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, NnConformance, ::testing::ValuesIn(kAllTargets), TargetName);

}  // namespace
}  // namespace tarn::cuda_testing
