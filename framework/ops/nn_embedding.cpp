// Embedding lookup (framework/ops/nn.h). Saves the ids; the backward accumulates rows of
// dWeight deterministically (kernels/embedding.h).
#include <memory>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/nn.h"
#include "kernels/embedding.h"

namespace tarn {

Tensor embedding(const Tensor& weight, const std::vector<int32_t>& ids, const Shape& ids_shape) {
  constexpr const char* kOp = "embedding";
  const kernels::Backend& k = ops_internal::kernels_for(kOp, weight);
  TARN_ASSERT(weight.dim() == 2, kOp, ": weight must be (vocab, dim), got shape ", weight.shape().str());
  TARN_ASSERT(static_cast<int64_t>(ids.size()) == ids_shape.numel(), kOp, ": ", ids.size(),
              " ids do not fill ids shape ", ids_shape.str());
  TARN_ASSERT(ids_shape.size() < Shape::kMaxDims, kOp, ": ids shape ", ids_shape.str(), " has too many axes");
  const int64_t vocab = weight.shape()[0], dim = weight.shape()[1];
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < n; ++i)
    TARN_ASSERT(ids[i] >= 0 && ids[i] < vocab, kOp, ": id ", ids[i], " at position ", i,
                " is outside the vocabulary [0, ", vocab, ") of weight ", weight.shape().str());

  std::vector<int64_t> out_dims = ids_shape.vec();
  out_dims.push_back(dim);
  const Device dev = weight.device();
  Tensor out = Tensor::empty(Shape(out_dims), dev);
  auto saved_ids = std::make_shared<const std::vector<int32_t>>(ids);
  Tensor device_ids;  // the ids in device memory (CUDA only), kept for the backward
  const int32_t* pids = ops_internal::ids_on(dev, dev.is_cpu() ? *saved_ids : ids, device_ids);  // ids: the staged vector
  k.embedding_forward(weight.device_f32(), pids, out.device_f32(), n, vocab, dim);

  const Shape ws = weight.shape();
  return record(kOp, out, {weight},
                [saved_ids, device_ids, pids, ws, n, vocab, dim](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = ops_internal::kernels_for("embedding", dy);
    Tensor dw = Tensor::empty(ws, dy.device());
    kb.embedding_backward(dy.device_f32(), pids, dw.device_f32(), n, vocab, dim);
    return {dw};
  });
}

}  // namespace tarn
