#pragma once
// Neural-network ops with fused forward and backward kernels, with autograd.
#include <cstdint>

#include "framework/tensor.h"
#include "kernels/cross_entropy.h"

namespace tarn {

// Numerically stable softmax over the last axis.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);

// Fused log-softmax + cross-entropy. logits: (..., V); targets: one id per row of logits (the
// logits' shape without its last axis, flattened). Rows whose target == ignore_index contribute
// nothing; other targets must lie in [0, V). label_smoothing eps mixes the one-hot target with
// the uniform distribution: loss = (1-eps) * nll + eps * mean(-logp). Returns the mean over
// non-ignored rows (shape ()); `count` (optional) receives how many rows counted, so the sum
// (for perplexity) is mean * count; `nll_sum` (optional) the summed NLL of the counted rows
// without smoothing, from the same pass.
//
// Nothing is read back from the device unless nll_sum is asked for: the count comes from the
// targets, the loss is written where the logits are, and the backward reads its upstream
// gradient there too. `totals` (optional) receives the pass's sums where they lie (see
// cross_entropy_totals below), for a caller that adds them up on the device (TrainStep).
struct CrossEntropyOptions {
  int32_t ignore_index = -100;
  float label_smoothing = 0.0f;
};
Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets,
                     const CrossEntropyOptions& opt = {}, int64_t* count = nullptr, double* nll_sum = nullptr,
                     Tensor* totals = nullptr);
// The sums behind cross_entropy's loss (kernels/cross_entropy.h), in the memory of the f32 tensor
// that cross_entropy's `totals` received (its storage holds one CrossEntropyTotals).
const kernels::cpu::CrossEntropyTotals* cross_entropy_totals(const Tensor& totals);

// Layer norm over the last axis, statistics in f32: y = (x - mean) / sqrt(var + eps) * gamma + beta.
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f);

// RMS norm over the last axis (kernels/rms_norm.h): y = x / sqrt(sum x^2 / divisor + eps) * gamma,
// gamma (last axis) or undefined (1). divisor = the last axis' size is RMSNorm; 1 scales each row
// to unit length.
Tensor rms_norm(const Tensor& x, const Tensor& gamma, float divisor, float eps);

// GELU: exact (0.5 x (1 + erf(x / sqrt 2)), as BART uses) or the tanh approximation.
enum class GeluKind { exact, tanh };
Tensor gelu(const Tensor& x, GeluKind kind = GeluKind::exact);

// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// The mask is a pure function of (seed, stream, element index) through Philox, so it is
// reproducible and needs no storage beyond the output; identity when !training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed, uint64_t stream);

// Embedding lookup: weight (V, D), ids (any shape, values in [0, V)) -> (ids..., D). Backward
// accumulates rows into dWeight (deterministically: no atomics). Out-of-range ids throw.
Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& ids_shape);

}  // namespace tarn
