// kernels/optim.h: the fused AdamW step, the sum of squares and the in-place scale, each
// against a naive double-precision loop, and independent of the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/rng.h"
#include "kernels/optim.h"
#include "kernels/parallel.h"

namespace tarn {
namespace {

constexpr int64_t kBig = 5 * kernels::kParallelGrain + 123;  // parallel path, ragged tail

std::vector<float> normals(int64_t n, uint64_t seed, float scale = 1.0f) {
  Philox rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(kernels::num_threads()) { kernels::set_num_threads(n); }
  ~ThreadCount() { kernels::set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(OptimKernels, AdamWStepMatchesDoubleFormulaOnEveryElement) {
  const int64_t n = kBig;
  std::vector<float> p = normals(n, 1), m = normals(n, 2, 0.1f), v = normals(n, 3, 0.01f), g = normals(n, 4);
  for (auto& x : v) x = x * x;  // second moments are >= 0
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  kernels::cpu::AdamWHyper h{3e-3f, 0.9f, 0.98f, 1e-6f, 0.1f, 7};
  kernels::cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);

  const double bc1 = 1 - std::pow(0.9, 7), bc2 = 1 - std::pow(0.98, 7);
  std::vector<double> rm(n), rv(n), rp(n);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i];
    rm[i] = 0.9 * m0[i] + 0.1 * gi;
    rv[i] = 0.98 * v0[i] + 0.02 * gi * gi;
    rp[i] = p0[i] * (1 - 3e-3 * 0.1) - 3e-3 * (rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + 1e-6);
  }
  // Max error over the array, relative to the array's largest value: f32 rounding is ~1e-7.
  const auto error = [](const std::vector<float>& got, const std::vector<double>& ref) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      diff = std::max(diff, std::fabs(got[i] - ref[i]));
      scale = std::max(scale, std::fabs(ref[i]));
    }
    return diff / scale;
  };
  EXPECT_LT(error(m, rm), 1e-6);
  EXPECT_LT(error(v, rv), 1e-6);
  EXPECT_LT(error(p, rp), 1e-6);
}

TEST(OptimKernels, AdamWStepDoesNotDependOnTheThreadCount) {
  std::vector<float> results[2];
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    std::vector<float> p = normals(kBig, 1), m(kBig, 0.0f), v(kBig, 0.0f);
    for (int step = 1; step <= 3; ++step) {
      const std::vector<float> g = normals(kBig, 10 + step);
      kernels::cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), kBig, {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, step});
    }
    results[threads - 1] = p;
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(OptimKernels, SumOfSquaresMatchesDoubleSumAndIgnoresThreadCount) {
  const std::vector<float> x = normals(kBig, 9, 3.0f);
  long double exact = 0;
  for (float xi : x) exact += static_cast<long double>(xi) * xi;
  double with[2];
  for (int threads : {1, 2}) {
    ThreadCount guard(threads);
    with[threads - 1] = kernels::cpu::sum_squares(x.data(), kBig);
  }
  EXPECT_EQ(with[0], with[1]);  // bit-identical: fixed blocks, added in block order
  EXPECT_NEAR(with[0], static_cast<double>(exact), 1e-12 * static_cast<double>(exact));
  EXPECT_EQ(kernels::cpu::sum_squares(x.data(), 0), 0.0);
  const float three = 3.0f;
  EXPECT_EQ(kernels::cpu::sum_squares(&three, 1), 9.0);
}

TEST(OptimKernels, SumOfSquaresPropagatesInfinityAndNaN) {
  std::vector<float> x(100, 1.0f);
  x[37] = INFINITY;
  EXPECT_TRUE(std::isinf(kernels::cpu::sum_squares(x.data(), 100)));
  x[37] = NAN;
  EXPECT_TRUE(std::isnan(kernels::cpu::sum_squares(x.data(), 100)));
}

TEST(OptimKernels, ScaleInPlaceMultipliesEveryElement) {
  std::vector<float> x = normals(kBig, 5);
  const std::vector<float> x0 = x;
  kernels::cpu::scale_inplace(x.data(), kBig, 0.25f);
  for (int64_t i = 0; i < kBig; ++i) ASSERT_EQ(x[i], x0[i] * 0.25f);
}

}  // namespace
}  // namespace tarn
