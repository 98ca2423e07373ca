#include "kernels/taylor_map.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

// Every feature but the constant is its parent (alpha less its last index) times u[index] times
// factor = 1 / sqrt(multiplicity of index in alpha), so that the coefficients multiply out to
// 1 / sqrt(alpha!). Generating the children of each feature of degree n - 1 in order, with
// indices from its last one up, lists degree n in lexicographic order: the documented order.
struct Step {
  int32_t parent;
  int32_t index;
  float factor;
};

std::vector<Step> steps(const TaylorMapDims& d) {
  std::vector<Step> s(static_cast<size_t>(taylor_feature_count(d.r, d.order)));
  std::vector<int32_t> last(s.size(), 0), run(s.size(), 0);  // last index and how often it repeats
  size_t next = 1, begin = 0, end = 1;                        // degree n - 1 is [begin, end)
  for (int n = 1; n <= d.order; ++n) {
    for (size_t f = begin; f < end; ++f)
      for (int32_t i = last[f]; i < d.r; ++i) {
        const int32_t m = (n > 1 && i == last[f]) ? run[f] + 1 : 1;
        s[next] = {static_cast<int32_t>(f), i, static_cast<float>(1.0 / std::sqrt(static_cast<double>(m)))};
        last[next] = i, run[next] = m;
        ++next;
      }
    begin = end, end = next;
  }
  return s;
}

// Calls row_fn(row, u, phi) for every row: u = p's row times 1 / r^(1/4), phi its features in a
// per-thread scratch of 2 F floats (the second half free for row_fn), rows spread over the
// threads when there is enough work.
template <typename RowFn>
void for_each_row(const TaylorMapDims& d, const std::vector<Step>& s, const float* p, RowFn row_fn) {
  const int64_t features = static_cast<int64_t>(s.size());
  const float scale = taylor_input_scale(d.r);
#pragma omp parallel if (d.rows * features >= kParallelGrain)
  {
    std::vector<float> scratch(static_cast<size_t>(2 * features));
    float u[256];
#pragma omp for schedule(static)
    for (int64_t row = 0; row < d.rows; ++row) {
      for (int64_t i = 0; i < d.r; ++i) u[i] = p[row * d.r + i] * scale;
      float* phi = scratch.data();
      phi[0] = 1.0f;
      for (int64_t f = 1; f < features; ++f) phi[f] = phi[s[f].parent] * u[s[f].index] * s[f].factor;
      row_fn(row, u, phi, scratch.data() + features);
    }
  }
}

}  // namespace

void taylor_map_forward(const TaylorMapDims& d, const float* p, float* phi) {
  check_taylor_map_dims(d);
  const std::vector<Step> s = steps(d);
  const int64_t features = static_cast<int64_t>(s.size());
  for_each_row(d, s, p, [&](int64_t row, const float*, const float* f, float*) {
    std::copy(f, f + features, phi + row * features);
  });
}

// Reverse mode through the steps: a feature's gradient reaches its parent and its index.
void taylor_map_backward(const TaylorMapDims& d, const float* p, const float* d_phi, float* dp) {
  check_taylor_map_dims(d);
  const std::vector<Step> s = steps(d);
  const int64_t features = static_cast<int64_t>(s.size());
  const float scale = taylor_input_scale(d.r);
  for_each_row(d, s, p, [&](int64_t row, const float* u, const float* phi, float* g) {
    float du[256] = {};
    std::copy(d_phi + row * features, d_phi + (row + 1) * features, g);
    for (int64_t f = features - 1; f >= 1; --f) {
      const float t = g[f] * s[f].factor;
      g[s[f].parent] += t * u[s[f].index];
      du[s[f].index] += t * phi[s[f].parent];
    }
    for (int64_t i = 0; i < d.r; ++i) dp[row * d.r + i] = du[i] * scale;
  });
}

}  // namespace tarn::kernels::cpu
