#include <gtest/gtest.h>

#include <cmath>

#include "framework/ops/nn.h"
#include "tests/ops/ops_reference.h"

namespace tarn {
namespace {

using testing::gradients_match;
using testing::param;
using testing::random_tensor;
using testing::relative_error;

// The mean loss and d(mean)/d(logits), in double, straight from the definitions:
// loss_r = -(1 - eps) log p_t - eps mean_j log p_j; grad = (p - (1 - eps) onehot - eps / V) / count.
struct Reference {
  double loss = 0;
  int64_t count = 0;
  std::vector<double> grad;
};
Reference reference(const Tensor& logits, const std::vector<int32_t>& targets, int32_t ignore, double eps) {
  const int64_t v = logits.shape().back(), rows = logits.numel() / v;
  const std::vector<float> x = logits.to_vector();
  Reference r;
  r.grad.assign(x.size(), 0.0);
  std::vector<double> lp(static_cast<size_t>(v));
  for (int64_t i = 0; i < rows; ++i) {
    if (targets[i] == ignore) continue;
    double m = -INFINITY, s = 0, mean_lp = 0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, double(x[i * v + j]));
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[i * v + j] - m);
    for (int64_t j = 0; j < v; ++j) {
      lp[j] = x[i * v + j] - m - std::log(s);
      mean_lp += lp[j] / v;
    }
    r.loss += -(1 - eps) * lp[targets[i]] - eps * mean_lp;
    ++r.count;
    for (int64_t j = 0; j < v; ++j) r.grad[i * v + j] = std::exp(lp[j]) - eps / v - (j == targets[i] ? 1 - eps : 0);
  }
  if (r.count) {
    r.loss /= r.count;
    for (double& g : r.grad) g /= r.count;
  }
  return r;
}

std::vector<int32_t> random_targets(int64_t n, int32_t vocab, uint64_t seed, int32_t ignore = -100, int every = 0) {
  Tensor u = random_tensor({n}, seed, 0.0f, 1.0f);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = every && i % every == 0 ? ignore : static_cast<int32_t>(u.f32()[i] * vocab);
  return t;
}

TEST(CrossEntropy, LossAndGradientMatchDoubleReference) {
  struct Case {
    Shape shape;
    float eps;
    int ignore_every;
  };
  for (const Case& c : {Case{{7, 13}, 0.0f, 0}, Case{{3, 5, 17}, 0.1f, 3}, Case{{300, 257}, 0.1f, 7},
                        Case{{40, 8000}, 0.2f, 5}}) {
    const int64_t v = c.shape.back(), rows = c.shape.numel() / v;
    Tensor x = param(c.shape, 1, -4, 4);
    CrossEntropyOptions opt;
    opt.ignore_index = 1;  // the pad id, as BART uses it
    opt.label_smoothing = c.eps;
    std::vector<int32_t> t = random_targets(rows, static_cast<int32_t>(v), 2, opt.ignore_index, c.ignore_every);
    const Reference ref = reference(x, t, opt.ignore_index, c.eps);
    int64_t count = -1;
    Tensor loss = cross_entropy(x, t, opt, &count);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_EQ(count, ref.count);
    EXPECT_NEAR(loss.item(), ref.loss, 1e-5 * ref.loss) << c.shape.str();
    loss.backward();
    EXPECT_LT(relative_error(x.grad().to_vector(), ref.grad), 1e-5) << c.shape.str();
  }
}

TEST(CrossEntropy, IgnoredRowsContributeNothing) {
  Tensor x = param({6, 11}, 3);
  std::vector<int32_t> t = {4, -100, 2, -100, 10, 0};
  Tensor loss = cross_entropy(x, t);
  // The same loss from only the kept rows.
  Tensor kept = Tensor::empty({4, 11});
  for (int r = 0, k = 0; r < 6; ++r)
    if (t[r] != -100) std::copy(x.f32() + r * 11, x.f32() + (r + 1) * 11, kept.f32() + 11 * k++);
  EXPECT_FLOAT_EQ(loss.item(), cross_entropy(kept, {4, 2, 10, 0}).item());
  loss.backward();
  const std::vector<float> g = x.grad().to_vector();
  for (int c = 0; c < 11; ++c) {
    EXPECT_EQ(g[1 * 11 + c], 0.0f);
    EXPECT_EQ(g[3 * 11 + c], 0.0f);
  }
}

TEST(CrossEntropy, LabelSmoothingMatchesTheFormula) {
  // loss = (1 - eps) nll + eps mean_j(-log p_j), checked on one row by hand.
  Tensor x = Tensor::from_vector({1.0f, 2.0f, 0.5f, -1.0f}, {1, 4});
  double lse = 0;
  for (double v : {1.0, 2.0, 0.5, -1.0}) lse += std::exp(v);
  lse = std::log(lse);
  const double nll = lse - 0.5, uniform = lse - (1.0 + 2.0 + 0.5 - 1.0) / 4;
  CrossEntropyOptions opt;
  opt.label_smoothing = 0.3f;
  EXPECT_NEAR(cross_entropy(x, {2}, opt).item(), 0.7 * nll + 0.3 * uniform, 1e-6);
}

TEST(CrossEntropy, NllSumIsTheUnsmoothedLossOfTheCountedRows) {
  // Two rows counted, one ignored: nll_sum must equal the eps = 0 loss times the count, while
  // the returned (smoothed) loss differs from it.
  Tensor x = param({3, 7}, 12);
  const std::vector<int32_t> t = {3, -100, 6};
  CrossEntropyOptions smoothed;
  smoothed.label_smoothing = 0.2f;
  int64_t count = 0;
  double nll_sum = 0;
  const float loss = cross_entropy(x, t, smoothed, &count, &nll_sum).item();
  const float plain = cross_entropy(x, t).item();
  EXPECT_EQ(count, 2);
  EXPECT_NEAR(nll_sum, 2.0 * plain, 1e-5);
  EXPECT_GT(std::fabs(loss - plain), 1e-3);
}

TEST(CrossEntropy, LargeLogitsGiveFiniteLossAndGradient) {
  Tensor x = param({8, 50}, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] *= 1e4f;
  CrossEntropyOptions opt;
  opt.label_smoothing = 0.1f;
  std::vector<int32_t> t = random_targets(8, 50, 5);
  Tensor loss = cross_entropy(x, t, opt);
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_NEAR(loss.item(), reference(x, t, -100, 0.1).loss, 1e-5 * std::fabs(loss.item()) + 1e-3);
  loss.backward();
  for (float g : x.grad().to_vector()) ASSERT_TRUE(std::isfinite(g));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  CrossEntropyOptions opt;
  opt.label_smoothing = 0.1f;
  opt.ignore_index = 0;
  const std::vector<int32_t> t = {3, 0, 16, 5, 9, 0, 1, 12, 2, 7, 11, 0, 4, 13, 8};
  auto fn = [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, opt); };
  EXPECT_TRUE(gradients_match(fn, {param({3, 5, 17}, 6, -2, 2)}));
}

TEST(CrossEntropy, UpstreamGradientScalesTheResult) {
  Tensor x = param({5, 9}, 7);
  const std::vector<int32_t> t = {1, 2, 3, 4, 5};
  cross_entropy(x, t).backward(Tensor::full({}, 2.5f));
  const Reference ref = reference(x, t, -100, 0.0);
  std::vector<double> scaled = ref.grad;
  for (double& g : scaled) g *= 2.5;
  EXPECT_LT(relative_error(x.grad().to_vector(), scaled), 1e-6);
}

TEST(CrossEntropy, AllRowsIgnoredGiveZeroLossAndZeroGradient) {
  Tensor x = param({3, 4}, 8);
  int64_t count = -1;
  Tensor loss = cross_entropy(x, {-100, -100, -100}, {}, &count);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(loss.item(), 0.0f);
  loss.backward();
  for (float g : x.grad().to_vector()) EXPECT_EQ(g, 0.0f);
}

TEST(CrossEntropy, BadTargetsThrowNamingTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 5});
  testing::expect_error([&] { cross_entropy(x, {0, 1, 2}); }, {"cross_entropy", "(2, 3, 5)", "6 targets", "got 3"});
  testing::expect_error([&] { cross_entropy(x, {0, 1, 2, 5, 0, 0}); }, {"cross_entropy", "target 5", "row 3", "[0, 5)"});
  testing::expect_error([&] { cross_entropy(x, {0, 1, 2, -1, 0, 0}); }, {"cross_entropy", "target -1"});
}

}  // namespace
}  // namespace tarn
