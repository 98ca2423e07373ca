// Fused log-softmax + cross-entropy with ignore index and label smoothing over (rows, vocab)
// logits (kernels/cross_entropy.h). The forward keeps one log-sum-exp per row and sums the row
// losses in row order (deterministic); the backward recomputes softmax from the lse.
//   row loss = (1 - eps) (lse - x_t) + eps (lse - mean_j x_j)
//   dlogits  = scale * (softmax - ((1 - eps) onehot_t + eps / V))
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

// One block per row: lse[r], row_loss[r] and row_nll[r] (0 on ignored rows, NaN for a target out
// of range).
__global__ void cross_entropy_rows_kernel(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                          int32_t ignore_index, float smoothing, float* lse, double* row_loss,
                                          double* row_nll) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * vocab;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) m = fmaxf(m, x[c]);
    m = block_max(m);
    float s = 0.0f, sx = 0.0f;
    for (int64_t c = threadIdx.x; c < vocab; c += blockDim.x) {
      s += expf(x[c] - m);
      sx += x[c];
    }
    s = block_sum(s);
    if (smoothing != 0.0f) sx = block_sum(sx);
    if (threadIdx.x == 0) {
      const float l = m + logf(s);
      lse[r] = l;
      const int32_t t = targets[r];
      double loss = 0.0, nll = 0.0;
      if (t != ignore_index) {
        if (t < 0 || t >= vocab) {
          loss = nll = NAN;  // the caller checks targets; never read outside the row
        } else {
          // Differences with lse: both terms >= 0, no cancellation beyond the logits' rounding.
          nll = static_cast<double>(l) - x[t];
          loss = (1.0 - smoothing) * nll;
          if (smoothing != 0.0f) loss += smoothing * (static_cast<double>(l) - static_cast<double>(sx) / vocab);
        }
      }
      row_loss[r] = loss;
      row_nll[r] = nll;
    }
  }
}

// One block: the counted rows' sums of row_loss and row_nll, their count, and the mean loss.
__global__ void cross_entropy_total_kernel(const double* row_loss, const double* row_nll, const int32_t* targets,
                                           int64_t rows, int32_t ignore_index, CrossEntropyTotals* total,
                                           float* mean) {
  double loss = 0.0, count = 0.0, nll = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    if (targets[r] == ignore_index) continue;
    loss += row_loss[r];
    nll += row_nll[r];
    count += 1.0;
  }
  loss = block_sum(loss);
  count = block_sum(count);
  nll = block_sum(nll);
  if (threadIdx.x == 0) {
    total->loss = loss;
    total->nll = nll;
    total->count = static_cast<int64_t>(count);
    *mean = count > 0.0 ? static_cast<float>(loss / count) : 0.0f;
  }
}

// dlogits (rows, vocab); x over the vocabulary, y strides over rows. With dy, the scale is
// *dy / count (the mean's backward, dy in device memory), else `scale`.
__global__ void cross_entropy_backward_kernel(const float* logits, const int32_t* targets, const float* lse,
                                              int64_t rows, int64_t vocab, int32_t ignore_index, float smoothing,
                                              float scale, const float* dy, int64_t count, float* dlogits) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= vocab) return;
  if (dy) scale = count ? *dy / static_cast<float>(count) : 0.0f;
  const float uniform = smoothing / static_cast<float>(vocab);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int32_t t = targets[r];
    float d = 0.0f;
    if (t != ignore_index) {
      d = scale * (expf(logits[r * vocab + c] - lse[r]) - uniform);
      if (c == t) d -= scale * (1.0f - smoothing);
    }
    dlogits[r * vocab + c] = d;
  }
}

}  // namespace

void cross_entropy_forward_totals(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                  int32_t ignore_index, float smoothing, float* lse, float* mean,
                                  CrossEntropyTotals* totals) {
  if (rows <= 0) {
    TARN_CUDA_CALL(cudaMemsetAsync(totals, 0, sizeof(CrossEntropyTotals), nullptr));
    TARN_CUDA_CALL(cudaMemsetAsync(mean, 0, sizeof(float), nullptr));
    return;
  }
  TARN_ASSERT(vocab > 0, "cross_entropy_forward: vocab must be positive, got ", vocab);
  Scratch<double> work(2 * rows);
  double* row_loss = work.get();
  double* row_nll = work.get() + rows;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY));
  tarn::launch(cross_entropy_rows_kernel, blocks, device::threads_for_row(vocab), 0, nullptr, logits, targets, rows,
               vocab, ignore_index, smoothing, lse, row_loss, row_nll);
  tarn::launch(cross_entropy_total_kernel, 1, kBlock, 0, nullptr, static_cast<const double*>(row_loss),
               static_cast<const double*>(row_nll), targets, rows, ignore_index, totals, mean);
}

CrossEntropySum cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      int32_t ignore_index, float smoothing, float* lse) {
  CrossEntropySum out;
  if (rows <= 0) return out;
  Scratch<CrossEntropyTotals> total(1);
  Scratch<float> mean(1);
  TARN_CUDA_NS::cross_entropy_forward_totals(logits, targets, rows, vocab, ignore_index, smoothing, lse, mean.get(),
                                            total.get());  // qualified: no ADL to cpu::
  const CrossEntropyTotals host = device::read_back(total.get());
  out.loss = host.loss;
  out.count = host.count;
  out.nll = host.nll;
  return out;
}

namespace {
void launch_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows, int64_t vocab,
                     int32_t ignore_index, float smoothing, float scale, const float* dy, int64_t count,
                     float* dlogits) {
  if (rows <= 0 || vocab <= 0) return;
  const dim3 grid(static_cast<unsigned>((vocab + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY)));
  tarn::launch(cross_entropy_backward_kernel, grid, kBlock, 0, nullptr, logits, targets, lse, rows, vocab,
               ignore_index, smoothing, scale, dy, count, dlogits);
}
}  // namespace

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                            int64_t vocab, int32_t ignore_index, float smoothing, float scale, float* dlogits) {
  launch_backward(logits, targets, lse, rows, vocab, ignore_index, smoothing, scale, nullptr, 0, dlogits);
}

void cross_entropy_backward_mean(const float* logits, const int32_t* targets, const float* lse, int64_t rows,
                                 int64_t vocab, int32_t ignore_index, float smoothing, const float* dy,
                                 int64_t count, float* dlogits) {
  launch_backward(logits, targets, lse, rows, vocab, ignore_index, smoothing, 0.0f, dy, count, dlogits);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
