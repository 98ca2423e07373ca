// Fused log-softmax + cross-entropy (framework/ops/nn.h). Saves the logits, the targets and
// one log-sum-exp per row; the backward writes softmax - smoothed one-hot scaled by dy / count
// straight from them (kernels/cross_entropy.h). Neither direction reads the device back: the
// count is the targets', the mean loss is written where the logits are, and the backward reads
// dy there.
#include <memory>

#include "framework/autograd.h"
#include "framework/backend.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/cross_entropy.h"

namespace tarn {

namespace {
// The f32 elements whose storage holds one CrossEntropyTotals.
constexpr int64_t kTotalsFloats =
    static_cast<int64_t>((sizeof(kernels::cpu::CrossEntropyTotals) + sizeof(float) - 1) / sizeof(float));
}  // namespace

const kernels::cpu::CrossEntropyTotals* cross_entropy_totals(const Tensor& totals) {
  TARN_ASSERT(totals.defined() && totals.dtype() == DType::f32 && totals.numel() == kTotalsFloats,
              "cross_entropy_totals: expected the totals tensor cross_entropy gave");
  return reinterpret_cast<const kernels::cpu::CrossEntropyTotals*>(totals.device_f32());
}

Tensor cross_entropy(const Tensor& logits, const std::vector<int32_t>& targets, const CrossEntropyOptions& opt,
                     int64_t* count, double* nll_sum, Tensor* totals_out) {
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
  const int32_t* ptargets = ops_internal::ids_on(dev, dev.is_cpu() ? *saved_targets : targets, device_targets);  // targets: the staged vector
  int64_t counted = 0;
  for (const int32_t t : targets) counted += t != opt.ignore_index;
  Tensor lse = Tensor::empty(Shape{rows}, dev);
  // Every row ignored: the mean of nothing is taken as 0 (with a zero gradient) rather than
  // PyTorch's NaN, so that an all-padding batch cannot poison the parameters.
  Tensor loss = Tensor::empty(Shape{}, dev);
  Tensor totals = Tensor::empty(Shape{kTotalsFloats}, dev);
  auto* sums = reinterpret_cast<kernels::cpu::CrossEntropyTotals*>(totals.device_f32());
  k.cross_entropy_forward_totals(logits.device_f32(), ptargets, rows, vocab, opt.ignore_index, opt.label_smoothing,
                                 lse.device_f32(), loss.device_f32(), sums);
  if (count) *count = counted;
  if (nll_sum) {  // the one read back, when asked for
    kernels::cpu::CrossEntropyTotals host;
    backend_for(dev).copy_device_to_host(&host, sums, sizeof host, dev.index);
    *nll_sum = host.nll;
  }
  if (totals_out) *totals_out = totals;

  Tensor x = logits.detach();
  return record(kOp, loss, {logits},
                [x, lse, saved_targets, device_targets, ptargets, counted, rows, vocab, opt](
                    const Tensor& dy, const NeedsGrad&) -> Grads {
                  const kernels::Backend& kb = ops_internal::kernels_for("cross_entropy", x, dy);
                  Tensor dx = Tensor::empty(x.shape(), x.device());
                  kb.cross_entropy_backward_mean(x.device_f32(), ptargets, lse.device_f32(), rows, vocab,
                                                 opt.ignore_index, opt.label_smoothing, dy.device_f32(), counted,
                                                 dx.device_f32());
                  return {dx};
                });
}

}  // namespace tarn
