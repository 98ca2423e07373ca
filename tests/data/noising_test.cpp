#include "data/noising.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/check.h"

namespace tarn {
namespace {

constexpr int32_t kMask = 4;
constexpr int32_t kFirstToken = 100;  // test tokens are distinct: kFirstToken + position

std::vector<int32_t> distinct_tokens(size_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), kFirstToken);
  return t;
}

IdSpan span_of(const std::vector<int32_t>& v) { return {v.data(), v.size()}; }

// Recovers the spans from a noised sequence of distinct increasing tokens: for each mask,
// how many input tokens it replaced (0 for an insertion). Checks the kept tokens are in order.
std::vector<int> recover_spans(const std::vector<int32_t>& out, size_t n) {
  std::vector<int> spans;
  int32_t expected = kFirstToken;  // the next input token not yet accounted for
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] != kMask) {
      EXPECT_GE(out[i], expected) << "kept tokens out of order";
      if (i == 0 || out[i - 1] != kMask) {
        EXPECT_EQ(out[i], expected) << "tokens vanished without a mask";
      }
      expected = out[i] + 1;
      continue;
    }
    // The mask covers everything up to the next kept token (or the end).
    const int32_t next = (i + 1 < out.size() && out[i + 1] != kMask) ? out[i + 1]
                                                                     : static_cast<int32_t>(kFirstToken + n);
    EXPECT_FALSE(i + 1 < out.size() && out[i + 1] == kMask) << "adjacent masks although gaps were free";
    spans.push_back(next - expected);
    expected = next;
  }
  EXPECT_EQ(expected, static_cast<int32_t>(kFirstToken + n));
  return spans;
}

TEST(Poisson, SampleMeanVarianceAndZeroRateMatchLambda) {
  constexpr double kLambda = 3.0;
  constexpr int kSamples = 40000;
  Philox rng(11);
  double sum = 0, sum_sq = 0;
  int zeros = 0;
  for (int i = 0; i < kSamples; ++i) {
    const int k = sample_poisson(rng, kLambda);
    sum += k;
    sum_sq += static_cast<double>(k) * k;
    zeros += k == 0;
  }
  const double mean = sum / kSamples, var = sum_sq / kSamples - mean * mean;
  // Standard errors: sqrt(3/40000) = 0.009 for the mean, ~0.03 for the variance.
  EXPECT_NEAR(mean, kLambda, 0.04);
  EXPECT_NEAR(var, kLambda, 0.12);
  EXPECT_NEAR(static_cast<double>(zeros) / kSamples, std::exp(-kLambda), 0.005);
}

TEST(TextInfilling, MasksThirtyPercentOfTokensExactlyOnLongSequences) {
  constexpr size_t kLength = 1000;
  const auto tokens = distinct_tokens(kLength);
  for (uint64_t stream = 0; stream < 50; ++stream) {
    Philox rng(5, stream);
    const auto out = infill_spans(span_of(tokens), 0.3, 3.0, kMask, rng);
    const auto spans = recover_spans(out, kLength);
    EXPECT_EQ(std::accumulate(spans.begin(), spans.end(), 0), 300) << "stream " << stream;
  }
}

TEST(TextInfilling, ExpectedMaskRatioIsExactOnShortSequences) {
  // 0.3 * 7 = 2.1 tokens: rounded down or up at random, 2.1 on average.
  constexpr size_t kLength = 7;
  constexpr int kTrials = 20000;
  const auto tokens = distinct_tokens(kLength);
  Philox rng(6);
  long masked = 0;
  for (int t = 0; t < kTrials; ++t) {
    const auto spans = recover_spans(infill_spans(span_of(tokens), 0.3, 3.0, kMask, rng), kLength);
    masked += std::accumulate(spans.begin(), spans.end(), 0);
  }
  EXPECT_NEAR(static_cast<double>(masked) / kTrials, 2.1, 0.02);
}

TEST(TextInfilling, SpanLengthsFollowPoissonAndZeroSpansInsertMasks) {
  constexpr size_t kLength = 2000;
  constexpr double kLambda = 3.0;
  const auto tokens = distinct_tokens(kLength);
  std::vector<int> all;
  for (uint64_t stream = 0; stream < 100; ++stream) {
    Philox rng(8, stream);
    const auto out = infill_spans(span_of(tokens), 0.3, kLambda, kMask, rng);
    auto spans = recover_spans(out, kLength);
    // Each mask stands for one span, so the source shrinks by (masked - spans).
    EXPECT_EQ(out.size(), kLength - 600 + spans.size());
    all.insert(all.end(), spans.begin(), spans.end());
  }
  // ~20,000 spans; one per example was cut short to hit the exact count (bias ~ -0.01).
  const double mean = std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
  const double zero_rate = static_cast<double>(std::count(all.begin(), all.end(), 0)) / static_cast<double>(all.size());
  EXPECT_NEAR(mean, kLambda, 0.08);
  EXPECT_NEAR(zero_rate, std::exp(-kLambda), 0.01);
  EXPECT_GT(*std::max_element(all.begin(), all.end()), 8);  // a real tail, not fixed-length spans
}

TEST(TextInfilling, SameSeedAndStreamGiveTheSameNoiseOthersDiffer) {
  const auto tokens = distinct_tokens(200);
  Philox a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  const auto out_a = infill_spans(span_of(tokens), 0.3, 3.0, kMask, a);
  EXPECT_EQ(out_a, infill_spans(span_of(tokens), 0.3, 3.0, kMask, b));
  EXPECT_NE(out_a, infill_spans(span_of(tokens), 0.3, 3.0, kMask, c));
  EXPECT_NE(out_a, infill_spans(span_of(tokens), 0.3, 3.0, kMask, d));
}

TEST(TextInfilling, ZeroRatioLeavesTextUnchangedAndFullRatioLeavesOnlyMasks) {
  const auto tokens = distinct_tokens(30);
  Philox rng(1);
  EXPECT_EQ(infill_spans(span_of(tokens), 0.0, 3.0, kMask, rng), tokens);
  const auto all = infill_spans(span_of(tokens), 1.0, 3.0, kMask, rng);
  EXPECT_FALSE(all.empty());
  for (int32_t t : all) EXPECT_EQ(t, kMask);
  EXPECT_TRUE(infill_spans({}, 0.3, 3.0, kMask, rng).empty());
}

TEST(TokenDeletion, DropsAboutTheRatioAndNeverAMask) {
  std::vector<int32_t> tokens = distinct_tokens(10000);
  tokens[10] = kMask;
  Philox rng(2);
  const auto out = delete_tokens(tokens, 0.1, kMask, rng);
  EXPECT_NEAR(static_cast<double>(out.size()) / 10000.0, 0.9, 0.015);
  EXPECT_NE(std::find(out.begin(), out.end(), kMask), out.end());
  int32_t last = 0;
  for (int32_t t : out)
    if (t != kMask) {
      EXPECT_GT(t, last);
      last = t;
    }
}

TEST(SentencePermutation, ReordersWholeSentencesOfAPackedExample) {
  std::vector<std::vector<int32_t>> sentences = {{10, 11}, {20, 21, 22}, {30}, {40, 41}, {50}};
  std::vector<IdSpan> spans;
  for (const auto& s : sentences) spans.push_back(span_of(s));
  NoiseConfig cfg;
  cfg.mask_ratio = 0.0;
  std::vector<int32_t> identity;
  for (const auto& s : sentences) identity.insert(identity.end(), s.begin(), s.end());
  int reordered = 0;
  for (uint64_t stream = 0; stream < 20; ++stream) {
    Philox rng(3, stream);
    const auto out = noise_example(spans, cfg, kMask, rng);
    ASSERT_EQ(out.size(), identity.size());
    // Sentences stay whole: each one's tokens appear consecutively and in order.
    for (const auto& s : sentences) {
      const auto at = std::find(out.begin(), out.end(), s[0]);
      ASSERT_NE(at, out.end());
      EXPECT_TRUE(std::equal(s.begin(), s.end(), at));
    }
    reordered += out != identity;
  }
  EXPECT_GE(reordered, 15);  // 5! orders: almost every draw differs from the original
  cfg.permute_sentences = false;
  Philox rng(3);
  EXPECT_EQ(noise_example(spans, cfg, kMask, rng), identity);
}

TEST(NoiseConfig, InvalidValuesAreErrorsNamingTheField) {
  NoiseConfig cfg;
  cfg.mask_ratio = 1.5;
  try {
    cfg.validate();
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("noise.mask_ratio"), std::string::npos) << e.what();
  }
  cfg = NoiseConfig();
  cfg.poisson_lambda = 0.0;
  EXPECT_THROW(cfg.validate(), Error);
  cfg = NoiseConfig();
  cfg.delete_ratio = 1.0;
  EXPECT_THROW(cfg.validate(), Error);
  EXPECT_NO_THROW(NoiseConfig().validate());
}

}  // namespace
}  // namespace tarn
