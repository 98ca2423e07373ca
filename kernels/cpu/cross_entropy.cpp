#include "kernels/cross_entropy.h"

#include <vector>

#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/parallel.h"

namespace tarn::kernels::cpu {

void cross_entropy_forward_totals(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  int32_t ignore_index, float smoothing, float* lse, float* mean,
                                  CrossEntropyTotals* totals) {
  const CrossEntropySum s = cross_entropy_forward(logits, targets, rows, vocab, ignore_index, smoothing, lse);
  totals->loss = s.loss;
  totals->nll = s.nll;
  totals->count = s.count;
  *mean = s.count ? static_cast<float>(s.loss / static_cast<double>(s.count)) : 0.0f;
}

void cross_entropy_backward_mean(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                                 int64_t vocab, int32_t ignore_index, float smoothing, const float* dy,
                                 int64_t count, float* dlogits) {
  const float scale = count ? *dy / static_cast<float>(count) : 0.0f;
  cross_entropy_backward(logits, targets, lse, rows, vocab, ignore_index, smoothing, scale, dlogits);
}

CrossEntropySum cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      int32_t ignore_index, float smoothing, float* lse) {
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0), row_nll(static_cast<size_t>(rows), 0.0);
  const double inv_vocab = 1.0 / static_cast<double>(vocab);
#pragma omp parallel for if (rows * vocab > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    const float l = row::logsumexp(x, vocab);
    lse[r] = l;
    const int32_t t = targets[r];
    if (t == ignore_index) continue;
    // Both terms are >= 0 and formed as differences with lse, so large logits (1e4) lose
    // nothing to cancellation beyond the f32 rounding of the logits themselves.
    const double nll = static_cast<double>(l) - x[t];
    double loss = (1.0 - smoothing) * nll;
    if (smoothing != 0.0f) loss += smoothing * (static_cast<double>(l) - row::sum(x, vocab) * inv_vocab);
    row_loss[r] = loss;
    row_nll[r] = nll;
  }
  CrossEntropySum total;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    total.loss += row_loss[r];
    total.nll += row_nll[r];
    ++total.count;
  }
  return total;
}

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                            int64_t vocab, int32_t ignore_index, float smoothing, float scale, float* dlogits) {
  const float uniform = smoothing / static_cast<float>(vocab);
#pragma omp parallel for if (rows * vocab > kParallelGrain) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dlogits + r * vocab;
    const int32_t t = targets[r];
    if (t == ignore_index) {
#pragma omp simd
      for (int64_t j = 0; j < vocab; ++j) d[j] = 0.0f;
      continue;
    }
    const float* x = logits + r * vocab;
    const float l = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < vocab; ++j) d[j] = scale * (math::exp(x[j] - l) - uniform);
    d[t] -= scale * (1.0f - smoothing);
  }
}

}  // namespace tarn::kernels::cpu
