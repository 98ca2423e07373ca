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
  ops_internal::check_cpu_f32(kOp, weight);
  TARN_CHECK(weight.dim() == 2, kOp, ": weight must be (vocab, dim), got shape ", weight.shape().str());
  TARN_CHECK(static_cast<int64_t>(ids.size()) == ids_shape.numel(), kOp, ": ", ids.size(),
             " ids do not fill ids shape ", ids_shape.str());
  TARN_CHECK(ids_shape.size() < Shape::kMaxDims, kOp, ": ids shape ", ids_shape.str(), " has too many axes");
  const int64_t vocab = weight.shape()[0], dim = weight.shape()[1];
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < n; ++i)
    TARN_CHECK(ids[i] >= 0 && ids[i] < vocab, kOp, ": id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab, ") of weight ", weight.shape().str());

  std::vector<int64_t> out_dims = ids_shape.vec();
  out_dims.push_back(dim);
  Tensor out = Tensor::empty(Shape(out_dims));
  kernels::cpu::embedding_forward(weight.f32(), ids.data(), out.f32(), n, vocab, dim);

  auto saved_ids = std::make_shared<const std::vector<int32_t>>(ids);
  const Shape ws = weight.shape();
  return record(kOp, out, {weight}, [saved_ids, ws, n, vocab, dim](const Tensor& dy, const NeedsGrad&) -> Grads {
    Tensor dw = Tensor::empty(ws);
    kernels::cpu::embedding_backward(dy.f32(), saved_ids->data(), dw.f32(), n, vocab, dim);
    return {dw};
  });
}

}  // namespace tarn
