#include "tests/common/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "framework/autograd.h"
#include "framework/rng.h"

namespace tarn::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape);
  Philox rng(seed);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng.uniform();
  return t;
}

double relative_error(const std::vector<float>& a, const std::vector<double>& b, double floor) {
  double max_ref = floor, max_diff = 0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    max_ref = std::max(max_ref, std::fabs(b[i]));
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
  }
  if (a.size() != b.size()) return INFINITY;
  return max_diff / max_ref;
}

namespace {
double weighted_sum(const Tensor& y, const std::vector<float>& w) {
  const std::vector<float> v = y.to_vector();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * w[i];
  return s;
}

// Every index when there are at most `most`; else `most` distinct indices drawn at random
// (seeded), the first and the last among them, in ascending order. A fixed stride from 0 would
// check the same few columns of a matrix whose width divides it, and never the others.
std::vector<int64_t> checked_indices(int64_t n, int64_t most, uint64_t seed) {
  std::vector<int64_t> out;
  if (n <= most) {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  std::set<int64_t> picked = {0, n - 1};
  std::uniform_int_distribution<int64_t> any(0, n - 1);
  while (static_cast<int64_t>(picked.size()) < most) picked.insert(any(rng));
  return {picked.begin(), picked.end()};
}

}  // namespace

::testing::AssertionResult gradients_match(const OpFn& fn, const std::vector<Tensor>& given,
                                           const GradcheckOptions& opt) {
  // Fresh leaves, so the caller's tensors keep their values and gradients.
  std::vector<Tensor> inputs;
  for (const Tensor& t : given) {
    if (!t.defined()) {
      inputs.push_back(t);
      continue;
    }
    Tensor c = t.clone();
    if (t.requires_grad()) c.set_requires_grad(true);
    inputs.push_back(c);
  }

  Tensor y = fn(inputs);
  Philox rng(opt.seed);
  std::vector<float> w(static_cast<size_t>(y.numel()));
  for (float& v : w) v = 2.0f * rng.uniform() - 1.0f;
  Tensor wt = Tensor::from_vector(w, y.shape());
  y.backward(wt);

  std::ostringstream failures;
  int bad = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor g = x.grad();
    if (!g.defined()) {
      failures << "input " << k << ": autograd produced no gradient\n";
      ++bad;
      continue;
    }
    const std::vector<float> analytic = g.to_vector();
    const int64_t n = x.numel();
    float* p = x.f32();
    for (const int64_t i : checked_indices(n, opt.max_checked_per_input, opt.seed + k)) {
      const float saved = p[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        p[i] = saved + static_cast<float>(opt.eps);
        plus = weighted_sum(fn(inputs), w);
        p[i] = saved - static_cast<float>(opt.eps);
        minus = weighted_sum(fn(inputs), w);
        p[i] = saved;
      }
      const double numeric = (plus - minus) / (2 * opt.eps);
      const double err = std::fabs(numeric - analytic[i]);
      if (!(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        if (bad < 10)
          failures << "input " << k << " " << x.shape().str() << " element " << i << ": autograd " << analytic[i]
                   << ", finite difference " << numeric << "\n";
        ++bad;
      }
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " gradient mismatches:\n" << failures.str();
  return ::testing::AssertionSuccess();
}

}  // namespace tarn::testing
