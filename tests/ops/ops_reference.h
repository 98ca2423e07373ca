#pragma once
// Helpers for the op tests: double-precision references, random inputs, error-message checks.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/tensor.h"
#include "kernels/parallel.h"
#include "tests/common/gradcheck.h"

namespace tarn::testing {

inline std::vector<double> to_double(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return {v.begin(), v.end()};
}

// A leaf that requires grad, uniform in [lo, hi).
inline Tensor param(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = random_tensor(shape, seed, lo, hi);
  t.set_requires_grad(true);
  return t;
}

// Row-major multi-index of flat index i in `s`.
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.size()));
  for (int d = s.size() - 1; d >= 0; --d) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}

// Flat index into `s` of the output multi-index `out_idx` under NumPy broadcasting.
inline int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& s) {
  const int lead = static_cast<int>(out_idx.size()) - s.size();
  int64_t flat = 0;
  for (int d = 0; d < s.size(); ++d) flat = flat * s[d] + (s[d] == 1 ? 0 : out_idx[d + lead]);
  return flat;
}

// out[i] = f(a[...], b[...]) with broadcasting, in double.
inline std::vector<double> broadcast_reference(const Tensor& a, const Tensor& b, const Shape& out,
                                               const std::function<double(double, double)>& f) {
  const std::vector<double> av = to_double(a), bv = to_double(b);
  std::vector<double> r(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    const std::vector<int64_t> idx = unravel(i, out);
    r[i] = f(av[broadcast_index(idx, a.shape())], bv[broadcast_index(idx, b.shape())]);
  }
  return r;
}

// Expects fn to throw tarn::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected tarn::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}

// Runs fn with the kernels' thread count set to n, restoring it after.
template <typename F>
auto with_threads(int n, F fn) {
  const int before = kernels::num_threads();
  kernels::set_num_threads(n);
  auto r = fn();
  kernels::set_num_threads(before);
  return r;
}

}  // namespace tarn::testing
