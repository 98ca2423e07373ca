#pragma once
// Softmax and log-softmax over the last axis of a (rows, cols) buffer, forward and backward.
// Stable: each row is shifted by its maximum before exp. One row at a time stays in L1/L2, so
// the extra passes over it (max, exp-sum, scale) cost cache bandwidth, not memory bandwidth.
// Parallel over rows.
#include <cstdint>

namespace tarn::kernels::cpu {

// x, y: (rows, cols). y = exp(x - max) / sum exp(x - max). A row of all -inf gives NaN (as in
// PyTorch): mask with a large negative number instead when a row can be fully masked.
void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);

// y = x - max - log(sum exp(x - max)).
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);

// From the saved output y = softmax(x): dx = y * (dy - sum(dy * y)) per row.
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);

// From the saved output y = log_softmax(x): dx = dy - exp(y) * sum(dy) per row.
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);

}  // namespace tarn::kernels::cpu
