#include "kernels/embedding.h"

#include <cstring>
#include <vector>

#include "kernels/parallel.h"

namespace tarn::kernels::cpu {

void embedding_forward(const float* weight, const int32_t* ids, float* out, int64_t n, int64_t vocab, int64_t dim) {
#pragma omp parallel for if (n * dim > kParallelGrain) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, weight + static_cast<int64_t>(ids[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
}

void embedding_backward(const float* dy, const int32_t* ids, float* dweight, int64_t n, int64_t vocab, int64_t dim) {
  // Counting sort of positions by id: start[v] .. start[v + 1] index into `order`, which lists
  // the positions holding id v in increasing order.
  std::vector<int64_t> start(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[ids[i] + 1];
  for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  std::vector<int64_t> order(static_cast<size_t>(n));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) order[next[ids[i]]++] = i;
  }
  // Rows are independent; dynamic scheduling evens out frequent ids (punctuation, padding).
  const int64_t work = (vocab + n) * dim;
#pragma omp parallel for if (work > kParallelGrain) schedule(dynamic, 64)
  for (int64_t v = 0; v < vocab; ++v) {
    float* dst = dweight + v * dim;
    const int64_t b = start[v], e = start[v + 1];
    if (b == e) {
      std::memset(dst, 0, static_cast<size_t>(dim) * sizeof(float));
      continue;
    }
    std::memcpy(dst, dy + order[b] * dim, static_cast<size_t>(dim) * sizeof(float));
    for (int64_t k = b + 1; k < e; ++k) {
      const float* src = dy + order[k] * dim;
#pragma omp simd
      for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace tarn::kernels::cpu
