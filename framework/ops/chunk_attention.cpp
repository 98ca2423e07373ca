#include "framework/ops/chunk_attention.h"

#include <memory>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/chunk_attention.h"

namespace tarn {

Tensor chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::vector<int32_t> chosen, int64_t chunk,
                       int64_t top, const Tensor& key_padding, float scale) {
  const char* op = "chunk_attention";
  for (const Tensor* t : {&q, &k, &v}) {
    ops_internal::check_f32(op, *t);
    TARN_ASSERT(t->device().is_cpu(), op, ": the CPU only");
    TARN_ASSERT(t->dim() == 4, op, ": expected (B, H, N, d), got ", t->shape().str());
  }
  kernels::cpu::ChunkAttentionDims s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), chunk, top};
  TARN_ASSERT(k.size(0) == s.batch && v.size(0) == s.batch && k.size(1) == s.heads && v.size(1) == s.heads &&
                  v.size(2) == s.nk && k.size(3) == s.d && v.size(3) == s.d && chunk >= 1 && top >= 1,
              op, ": shapes q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str());
  TARN_ASSERT(static_cast<int64_t>(chosen.size()) == s.batch * s.heads * s.nq * top, op, ": ", chosen.size(),
              " chosen chunks for ", s.batch * s.heads * s.nq, " queries x ", top);
  const int64_t chunks = (s.nk + chunk - 1) / chunk;
  for (size_t row = 0; row < chosen.size(); row += static_cast<size_t>(top))
    for (int64_t t = 0; t < top; ++t) {
      const int32_t c = chosen[row + t];
      TARN_ASSERT(c >= -1 && c < chunks, op, ": chunk ", c, " of ", chunks);
      for (int64_t u = 0; u < t && c >= 0; ++u) TARN_ASSERT(chosen[row + u] != c, op, ": chunk ", c, " chosen twice");
    }
  TARN_ASSERT(!key_padding.defined() || key_padding.numel() == s.batch * s.nk, op, ": key_padding must be (B, Nk)");
  const float* padded = key_padding.defined() ? key_padding.f32() : nullptr;
  auto picks = std::make_shared<const std::vector<int32_t>>(std::move(chosen));
  Tensor out = Tensor::empty(q.shape());
  Tensor lse = Tensor::empty({s.batch, s.heads, s.nq});
  kernels::cpu::chunk_attention_forward(s, q.f32(), k.f32(), v.f32(), picks->data(), padded, scale, out.f32(), lse.f32());
  return record(op, out, {q, k, v}, [=](const Tensor& dout, const NeedsGrad& needs) -> Grads {
    Tensor dq = needs[0] ? Tensor::empty(q.shape()) : Tensor();
    Tensor dk = needs[1] ? Tensor::empty(k.shape()) : Tensor();
    Tensor dv = needs[2] ? Tensor::empty(v.shape()) : Tensor();
    kernels::cpu::chunk_attention_backward(s, q.f32(), k.f32(), v.f32(), picks->data(),
                                           key_padding.defined() ? key_padding.f32() : nullptr, scale, out.f32(),
                                           lse.f32(), dout.f32(), needs[0] ? dq.f32() : nullptr,
                                           needs[1] ? dk.f32() : nullptr, needs[2] ? dv.f32() : nullptr);
    return {dq, dk, dv};
  });
}

}  // namespace tarn
