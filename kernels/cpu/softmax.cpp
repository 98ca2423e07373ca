#include "kernels/softmax.h"

#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

// Calls row_fn(offset) for each row's first element, rows spread over the threads once the
// matrix is large enough to pay for waking them. Every kernel here works row by row.
template <class RowFn>
void for_each_row(int64_t rows, int64_t cols, RowFn row_fn) {
#pragma omp parallel for if (rows * cols > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) row_fn(r * cols);
}

}  // namespace

void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  for_each_row(rows, cols, [=](int64_t at) {
    const float* xr = x + at;
    float* yr = y + at;
    const float m = row::max(xr, cols);
    double s = 0.0;  // double: see softmax_row.h
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) {
      const float e = math::exp(xr[c] - m);
      yr[c] = e;
      s += e;
    }
    const float inv = static_cast<float>(1.0 / s);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  });
}

void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  for_each_row(rows, cols, [=](int64_t at) {
    const float* xr = x + at;
    const float lse = row::logsumexp(xr, cols);
    float* yr = y + at;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
  });
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  for_each_row(rows, cols, [=](int64_t at) {
    const float* yr = y + at;
    const float* gr = dy + at;
    float* dr = dx + at;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < cols; ++c) acc += yr[c] * gr[c];
    const float dot = static_cast<float>(acc);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dr[c] = yr[c] * (gr[c] - dot);
  });
}

void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols) {
  for_each_row(rows, cols, [=](int64_t at) {
    const float* yr = y + at;
    const float* gr = dy + at;
    float* dr = dx + at;
    const float total = row::sum(gr, cols);
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dr[c] = gr[c] - math::exp(yr[c]) * total;
  });
}

}  // namespace tarn::kernels::cpu
