#include "tests/common/gradcheck.h"

#include <algorithm>
#include <cmath>
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
    const int64_t stride = std::max<int64_t>(1, n / opt.max_checked_per_input);
    float* p = x.f32();
    for (int64_t i = 0; i < n; i += stride) {
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
