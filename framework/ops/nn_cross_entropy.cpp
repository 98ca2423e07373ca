// Fused log-softmax + cross-entropy (framework/ops/nn.h). Saves the logits, the targets and
// one log-sum-exp per row; the backward writes softmax - smoothed one-hot scaled by dy / count
// straight from them (kernels/cross_entropy.h).
#include <memory>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/cross_entropy.h"

namespace tarn {

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets, const CrossEntropyOptions& opt,
                     int64_t* count, double* nll_sum) {
  constexpr const char* kOp = "cross_entropy";
  const kernels::Backend& k = ops_internal::kernels_for(kOp, logits);
  TARN_ASSERT(logits.dim() >= 1, kOp, ": logits need a vocabulary axis, got shape ", logits.shape().str());
  const int64_t vocab = logits.shape().back();
  const int64_t rows = vocab ? logits.numel() / vocab : 0;
  TARN_ASSERT(vocab > 0, kOp, ": logits of shape ", logits.shape().str(), " have an empty vocabulary axis");
  TARN_ASSERT(static_cast<int64_t>(targets.size()) == rows, kOp, ": logits of shape ", logits.shape().str(),
              " need ", rows, " targets, got ", targets.size());
  TARN_ASSERT(opt.label_smoothing >= 0.0f && opt.label_smoothing <= 1.0f, kOp,
              ": label_smoothing must be in [0, 1], got ", opt.label_smoothing);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = targets[r];
    TARN_ASSERT(t == opt.ignore_index || (t >= 0 && t < vocab), kOp, ": target ", t, " at row ", r,
                " is outside the vocabulary [0, ", vocab, ") of logits ", logits.shape().str(),
                " and is not the ignore_index ", opt.ignore_index);
  }

  const Device dev = logits.device();
  auto saved_targets = std::make_shared<const std::vector<int32_t>>(targets);
  Tensor device_targets;  // the targets in device memory (CUDA only), kept for the backward
  const int32_t* ptargets = ops_internal::ids_on(dev, *saved_targets, device_targets);
  Tensor lse = Tensor::empty(Shape{rows}, dev);
  const kernels::cpu::CrossEntropySum total = k.cross_entropy_forward(
      logits.device_f32(), ptargets, rows, vocab, opt.ignore_index, opt.label_smoothing, lse.device_f32());
  if (count) *count = total.count;
  if (nll_sum) *nll_sum = total.nll;
  // Every row ignored: the mean of nothing is taken as 0 (with a zero gradient) rather than
  // PyTorch's NaN, so that an all-padding batch cannot poison the parameters.
  const double mean = total.count ? total.loss / static_cast<double>(total.count) : 0.0;
  Tensor loss = Tensor::full(Shape{}, static_cast<float>(mean), dev);

  Tensor x = logits.detach();
  const int64_t counted = total.count;
  return record(kOp, loss, {logits},
                [x, lse, saved_targets, device_targets, ptargets, counted, rows, vocab, opt](
                    const Tensor& dy, const NeedsGrad&) -> Grads {
                  const kernels::Backend& kb = ops_internal::kernels_for("cross_entropy", x);
                  Tensor dx = Tensor::empty(x.shape(), x.device());
                  const float scale = counted ? dy.item() / static_cast<float>(counted) : 0.0f;
                  kb.cross_entropy_backward(x.device_f32(), ptargets, lse.device_f32(), rows, vocab,
                                            opt.ignore_index, opt.label_smoothing, scale, dx.device_f32());
                  return {dx};
                });
}

}  // namespace tarn
