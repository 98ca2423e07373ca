#include "kernels/taylor_map.h"

#include <vector>

#include "kernels/check.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

void check(const TaylorMapDims& d) {
  TARN_CHECK(d.rows >= 0 && d.r >= 1 && d.r <= 255 && d.order >= 1 && d.order <= kMaxTaylorOrder,
             "taylor map: bad dims rows ", d.rows, " r ", d.r, " order ", d.order, " (r 1..255, order 1..",
             kMaxTaylorOrder, ")");
}

std::vector<TaylorFeature> table(const TaylorMapDims& d) {
  std::vector<TaylorFeature> t(static_cast<size_t>(taylor_feature_count(d.r, d.order)));
  for (size_t f = 0; f < t.size(); ++f) t[f] = taylor_feature(d.r, static_cast<int64_t>(f));
  return t;
}

// Calls row_fn(row, u, table) for every row, with u = p's row times 1 / r^(1/4), rows spread over
// the threads when there is enough work.
template <typename RowFn>
void for_each_row(const TaylorMapDims& d, const float* p, RowFn row_fn) {
  check(d);
  const std::vector<TaylorFeature> t = table(d);
  const float s = taylor_input_scale(d.r);
#pragma omp parallel for schedule(static) if (d.rows * static_cast<int64_t>(t.size()) >= kParallelGrain)
  for (int64_t row = 0; row < d.rows; ++row) {
    float u[256];
    for (int64_t i = 0; i < d.r; ++i) u[i] = p[row * d.r + i] * s;
    row_fn(row, u, t);
  }
}

}  // namespace

void taylor_map_forward(const TaylorMapDims& d, const float* p, float* phi) {
  for_each_row(d, p, [&](int64_t row, const float* u, const std::vector<TaylorFeature>& t) {
    const int64_t features = static_cast<int64_t>(t.size());
    float* out = phi + row * features;
    for (int64_t f = 0; f < features; ++f) {
      float x = t[f].coef;
      for (int j = 0; j < t[f].degree; ++j) x *= u[taylor_index(t[f].packed, j)];
      out[f] = x;
    }
  });
}

void taylor_map_backward(const TaylorMapDims& d, const float* p, const float* d_phi, float* dp) {
  const float s = taylor_input_scale(d.r);
  for_each_row(d, p, [&](int64_t row, const float* u, const std::vector<TaylorFeature>& t) {
    const int64_t features = static_cast<int64_t>(t.size());
    float du[256] = {};
    const float* g = d_phi + row * features;
    for (int64_t f = 1; f < features; ++f) {  // feature 0 is the constant 1
      const float gf = g[f] * t[f].coef;
      for (int j = 0; j < t[f].degree; ++j) {  // d/du_{i_j} of prod_l u_{i_l}: the other factors
        float x = gf;
        for (int l = 0; l < t[f].degree; ++l)
          if (l != j) x *= u[taylor_index(t[f].packed, l)];
        du[taylor_index(t[f].packed, j)] += x;
      }
    }
    for (int64_t i = 0; i < d.r; ++i) dp[row * d.r + i] = du[i] * s;
  });
}

}  // namespace tarn::kernels::cpu
