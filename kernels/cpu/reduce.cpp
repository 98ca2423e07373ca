#include "kernels/reduce.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/elementwise_parallel.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {
namespace {

// Contiguous sums are cut into blocks of kSumBlock values (8 KiB: summed in f32 with vector
// accumulators, error ~ sqrt(kSumBlock / lanes) ulp); block sums are combined in double.
constexpr int64_t kSumBlock = 2048;
// Sums over a strided axis accumulate kRowBlock rows of a column tile in f32, then combine the
// row-block partials in order. The tile (kColTile floats = 4 KiB) stays in L1 while rows stream.
constexpr int64_t kRowBlock = 64;
constexpr int64_t kColTile = 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

float block_sum(const float* x, int64_t len) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < len; ++i) s += x[i];
  return s;
}

// out[o] = alpha * sum of x[o, :] (inner == 1).
void sum_rows(const float* x, float* out, int64_t outer, int64_t n, float alpha) {
  const int64_t blocks = std::max<int64_t>(1, ceil_div(n, kSumBlock));
  const bool parallel = outer * n > kParallelGrain;
  if (blocks == 1) {
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t o = 0; o < outer; ++o) out[o] = alpha * block_sum(x + o * n, n);
    return;
  }
  std::vector<float> partial(static_cast<size_t>(outer * blocks));
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t t = 0; t < outer * blocks; ++t) {
    const int64_t o = t / blocks, b = t % blocks;
    const int64_t begin = b * kSumBlock;
    partial[t] = block_sum(x + o * n + begin, std::min(kSumBlock, n - begin));
  }
  for (int64_t o = 0; o < outer; ++o) {
    double s = 0.0;
    for (int64_t b = 0; b < blocks; ++b) s += partial[o * blocks + b];
    out[o] = static_cast<float>(alpha * s);
  }
}

// acc[0, len) (+)= sum of rows [r0, r1) of the column tile starting at x, row stride `stride`.
void accumulate_rows(const float* x, int64_t stride, int64_t r0, int64_t r1, float* acc, int64_t len) {
#pragma omp simd
  for (int64_t c = 0; c < len; ++c) acc[c] = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * stride;
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) acc[c] += row[c];
  }
}

// out[o, c] = alpha * sum over i of x[o, i, c] (inner > 1).
void sum_columns(const float* x, float* out, int64_t outer, int64_t n, int64_t inner, float alpha) {
  const int64_t row_blocks = std::max<int64_t>(1, ceil_div(n, kRowBlock));
  const int64_t tiles = ceil_div(inner, kColTile);
  const bool parallel = outer * n * inner > kParallelGrain;
  // Row-block partials: (outer, row_blocks, inner), or straight into out when there is one block.
  std::vector<float> partial(row_blocks > 1 ? static_cast<size_t>(outer * row_blocks * inner) : 0);
  const int64_t tasks = outer * row_blocks * tiles;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / (row_blocks * tiles), rb = (t / tiles) % row_blocks, tile = t % tiles;
    const int64_t c0 = tile * kColTile, len = std::min(kColTile, inner - c0);
    float* acc = row_blocks > 1 ? partial.data() + (o * row_blocks + rb) * inner + c0 : out + o * inner + c0;
    accumulate_rows(x + o * n * inner + c0, inner, rb * kRowBlock, std::min(n, (rb + 1) * kRowBlock), acc, len);
    if (row_blocks == 1) {
#pragma omp simd
      for (int64_t c = 0; c < len; ++c) acc[c] *= alpha;
    }
  }
  if (row_blocks == 1) return;
#pragma omp parallel for if (parallel) schedule(static)
  for (int64_t t = 0; t < outer * tiles; ++t) {
    const int64_t o = t / tiles, c0 = (t % tiles) * kColTile, len = std::min(kColTile, inner - c0);
    float* dst = out + o * inner + c0;
    const float* src = partial.data() + o * row_blocks * inner + c0;
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) dst[c] = src[c];
    for (int64_t rb = 1; rb < row_blocks; ++rb) {
      const float* p = src + rb * inner;
#pragma omp simd
      for (int64_t c = 0; c < len; ++c) dst[c] += p[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) dst[c] *= alpha;
  }
}

}  // namespace

void sum_axis(const float* x, float* out, int64_t outer, int64_t n, int64_t inner, float alpha) {
  if (outer == 0 || inner == 0) return;
  if (inner == 1) return sum_rows(x, out, outer, n, alpha);
  sum_columns(x, out, outer, n, inner, alpha);
}

double sum_all(const float* x, int64_t n) {
  const int64_t blocks = ceil_div(n, kSumBlock);
  std::vector<float> partial(static_cast<size_t>(blocks));
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumBlock;
    partial[b] = block_sum(x + begin, std::min(kSumBlock, n - begin));
  }
  double s = 0.0;
  for (float p : partial) s += p;
  return s;
}

void broadcast_axis(const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner, float alpha) {
  const int64_t rows = outer * n;
  if (inner == 1) {  // a fill per outer index: keep the loop over the long axis
    if (outer == 1) {
      const float v = alpha * dy[0];
      parallel_chunks(n, [=](int64_t begin, int64_t end) {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) dx[i] = v;
      });
      return;
    }
#pragma omp parallel for if (rows > kParallelGrain) schedule(static)
    for (int64_t o = 0; o < outer; ++o) {
      const float v = alpha * dy[o];
      float* dst = dx + o * n;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) dst[i] = v;
    }
    return;
  }
#pragma omp parallel for if (rows * inner > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = dy + (r / n) * inner;
    float* dst = dx + r * inner;
#pragma omp simd
    for (int64_t c = 0; c < inner; ++c) dst[c] = alpha * src[c];
  }
}

}  // namespace tarn::kernels::cpu
