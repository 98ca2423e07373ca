#pragma once
// Fused log-softmax + cross-entropy with ignore index and label smoothing, over (rows, vocab)
// logits. Nothing of the logits' size is materialised in the forward: per row it keeps only
// the log-sum-exp; the backward recomputes softmax from it (one read of the logits, one write
// of the gradient). Parallel over rows; the loss is summed in row order (deterministic).
//
// With eps = label smoothing, t the target and lse = logsumexp(x) the row loss is
//   (1 - eps) (lse - x_t) + eps (lse - mean_j x_j)
// i.e. (1 - eps) nll + eps mean_j(-log p_j); its gradient is softmax - ((1 - eps) onehot_t + eps / V).
#include <cstdint>

namespace tarn::kernels::cpu {

struct CrossEntropySum {
  double loss = 0.0;  // sum of the counted rows' losses
  double nll = 0.0;   // sum of the counted rows' lse - x_t (the loss without smoothing, for perplexity)
  int64_t count = 0;  // rows whose target is not ignore_index
};

// logits (rows, vocab); targets (rows), each in [0, vocab) or == ignore_index (the caller
// checks). Writes lse (rows): the log-sum-exp of every row (ignored rows too).
CrossEntropySum cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      int32_t ignore_index, float smoothing, float* lse);

// dlogits (rows, vocab) = scale * (softmax - smoothed one-hot) on counted rows, 0 on ignored
// rows. scale is d(loss)/d(row loss): upstream gradient / count for the mean.
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                            int64_t vocab, int32_t ignore_index, float smoothing, float scale, float* dlogits);

// The same sums left in memory instead of returned (device memory on CUDA, where returning
// them would wait for the device), for a caller that reads them later or never.
struct CrossEntropyTotals {
  double loss = 0.0;
  double nll = 0.0;
  int64_t count = 0;
};

// cross_entropy_forward, writing its sums to *totals and the mean loss over the counted rows to
// *mean (loss / count rounded to f32; 0 when no row counts).
void cross_entropy_forward_totals(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  int32_t ignore_index, float smoothing, float* lse, float* mean,
                                  CrossEntropyTotals* totals);

// The backward of that mean: cross_entropy_backward with scale = *dy / count in f32 (0 when
// count is 0), *dy read where it lies rather than passed in.
void cross_entropy_backward_mean(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                                 int64_t vocab, int32_t ignore_index, float smoothing, const float* dy,
                                 int64_t count, float* dlogits);

}  // namespace tarn::kernels::cpu
