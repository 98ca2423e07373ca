#include <gtest/gtest.h>

#include <cmath>

#include "framework/ops/nn.h"
#include "framework/rng.h"
#include "kernels/dropout.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::param;
using testing::random_tensor;

TEST(Dropout, ZeroedFractionIsWithinSamplingErrorOfP) {
  Tensor x = Tensor::ones({300, 257});
  const double n = 300.0 * 257.0;
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const std::vector<float> y = dropout(x, p, true, 42, 7).to_vector();
    int64_t zeros = 0;
    for (float v : y) zeros += v == 0.0f;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(zeros / n, p, 5 * sigma) << "p " << p;
  }
}

TEST(Dropout, KeptValuesAreScaledByOneOverKeepProbability) {
  Tensor x = random_tensor({7, 13}, 1, 0.5f, 1.5f);
  const std::vector<float> xv = x.to_vector(), y = dropout(x, 0.25f, true, 3, 0).to_vector();
  for (size_t i = 0; i < xv.size(); ++i)
    if (y[i] != 0.0f) {
      EXPECT_FLOAT_EQ(y[i], xv[i] / 0.75f);
    }
}

TEST(Dropout, SameSeedAndStreamGiveTheSameMaskOthersDiffer) {
  Tensor x = Tensor::ones({3, 5, 17});
  const std::vector<float> a = dropout(x, 0.5f, true, 11, 2).to_vector();
  EXPECT_EQ(a, dropout(x, 0.5f, true, 11, 2).to_vector());
  EXPECT_NE(a, dropout(x, 0.5f, true, 12, 2).to_vector());
  EXPECT_NE(a, dropout(x, 0.5f, true, 11, 3).to_vector());
}

TEST(Dropout, MaskIsPhiloxOutputAtTheElementIndex) {
  // Element i is dropped iff philox_at(seed, stream, i) < round(p 2^32): the kernel's own
  // Philox agrees with framework/rng.h, so CPU and CUDA masks can agree too.
  const uint64_t seed = 0x123456789abcdefULL, stream = 0xfedcba987ULL;
  const float p = 0.3f;
  Tensor x = Tensor::ones({1000 + 37});  // several vector batches and a ragged tail
  const std::vector<float> y = dropout(x, p, true, seed, stream).to_vector();
  const uint64_t threshold = kernels::cpu::dropout_threshold(p);
  EXPECT_EQ(threshold, static_cast<uint64_t>(std::llround(0.3f * 4294967296.0)));
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_EQ(y[i] == 0.0f, philox_at(seed, stream, i) < threshold) << "element " << i;
}

TEST(Dropout, BackwardAppliesTheSameMaskAndScale) {
  Tensor x = param({300, 257}, 4);
  Tensor y = dropout(x, 0.4f, true, 5, 6);
  Tensor dy = random_tensor({300, 257}, 7);
  y.backward(dy);
  const std::vector<float> yv = y.to_vector(), g = dy.to_vector(), dx = x.grad().to_vector();
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(dx[i], yv[i] == 0.0f ? 0.0f : g[i] * (1.0f / 0.6f)) << i;
}

TEST(Dropout, EvalModeAndZeroPAreTheIdentity) {
  Tensor x = param({7, 13}, 8);
  Tensor y = dropout(x, 0.5f, false, 1, 1);
  EXPECT_TRUE(y.same_storage(x));
  EXPECT_EQ(y.to_vector(), x.to_vector());
  EXPECT_EQ(dropout(x, 0.0f, true, 1, 1).to_vector(), x.to_vector());
}

TEST(Dropout, PEqualToOneZeroesEverythingAndBadPThrows) {
  Tensor x = random_tensor({5, 9}, 9);
  for (float v : dropout(x, 1.0f, true, 1, 1).to_vector()) EXPECT_EQ(v, 0.0f);
  testing::expect_error([&] { dropout(x, 1.5f, true, 1, 1); }, {"dropout", "1.5"});
}

}  // namespace
}  // namespace tarn
