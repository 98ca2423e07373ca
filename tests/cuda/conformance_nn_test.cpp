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
#include "kernels/softmax.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {
namespace {

constexpr int64_t kRows = 37, kCols = 129;

class NnConformance : public Conformance {};

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
      EXPECT_TRUE(AllClose(y.host(), want_y, kRtol, kAtol)) << "forward, log " << log << ", cols " << cols;
      auto dy_ref = dev(want_y);
      auto dx = out(n);
      if (log)
        TARN_ON(target(), log_softmax_backward, dy_ref.get(), ddy.get(), dx.get(), kRows, cols);
      else
        TARN_ON(target(), softmax_backward, dy_ref.get(), ddy.get(), dx.get(), kRows, cols);
      EXPECT_TRUE(AllClose(dx.host(), want_dx, 1e-4f, 1e-6f)) << "backward, log " << log << ", cols " << cols;
    }
  }
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
      EXPECT_NEAR(got.loss, want.loss, 1e-5 * std::fabs(want.loss)) << "vocab " << vocab << " eps " << smoothing;
      EXPECT_NEAR(got.nll, want.nll, 1e-5 * std::fabs(want.nll)) << "vocab " << vocab << " eps " << smoothing;
      EXPECT_TRUE(AllClose(lse.host(), want_lse, 1e-6f, 1e-6f));
      const float scale = 1.0f / static_cast<float>(want.count);
      std::vector<float> want_d(kRows * vocab);
      kernels::cpu::cross_entropy_backward(logits.data(), targets.data(), want_lse.data(), kRows, vocab, ignore,
                                           smoothing, scale, want_d.data());
      auto lse_ref = dev(want_lse);
      auto d = out(want_d.size());
      TARN_ON(target(), cross_entropy_backward, dl.get(), dt.get(), lse_ref.get(), kRows, vocab, ignore, smoothing,
              scale, d.get());
      EXPECT_TRUE(AllClose(d.host(), want_d, 1e-5f, 1e-7f)) << "vocab " << vocab << " eps " << smoothing;
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
    EXPECT_TRUE(AllClose(y.host(), want_y, 1e-5f, 1e-5f)) << "case " << index;
    EXPECT_TRUE(AllClose(mean.host(), want_mean, 1e-5f, 1e-6f)) << "case " << index;
    EXPECT_TRUE(AllClose(rstd.host(), want_rstd, 1e-5f, 1e-6f)) << "case " << index;
    auto mean_ref = dev(want_mean), rstd_ref = dev(want_rstd);
    auto dx = out(n), dg = out(c.cols), db = out(c.cols);
    TARN_ON(target(), layer_norm_backward, dx_in.get(), ddy.get(), c.affine ? dgam.get() : nullptr, mean_ref.get(),
            rstd_ref.get(), dx.get(), dg.get(), db.get(), c.rows, c.cols);
    EXPECT_TRUE(AllClose(dx.host(), want_dx, 1e-4f, 1e-5f)) << "case " << index;
    EXPECT_TRUE(AllClose(dg.host(), want_dg, 1e-4f, 1e-5f)) << "case " << index;
    EXPECT_TRUE(AllClose(db.host(), want_db, 1e-4f, 1e-5f)) << "case " << index;
    // Each output alone (the others null) gives the same values.
    auto dg_only = out(c.cols);
    TARN_ON(target(), layer_norm_backward, dx_in.get(), ddy.get(), c.affine ? dgam.get() : nullptr, mean_ref.get(),
            rstd_ref.get(), nullptr, dg_only.get(), nullptr, c.rows, c.cols);
    EXPECT_TRUE(BitwiseEqual(dg_only.host(), dg.host())) << "case " << index;
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
    EXPECT_TRUE(AllClose(y.host(), want_y, 1e-5f, 1e-6f)) << "kind " << static_cast<int>(kind);
    EXPECT_TRUE(AllClose(dx.host(), want_dx, 1e-5f, 1e-6f)) << "kind " << static_cast<int>(kind);
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
