#include "framework/ops/chunk_attention.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/chunk_attention.h"

namespace tarn {
namespace {

using kernels::cpu::ChunkAttentionDims;

const float* optional_f32(const Tensor& t) { return t.defined() ? t.device_f32() : nullptr; }

void check_padding(const char* op, const Tensor& x, const Tensor& key_padding, int64_t batch, int64_t n) {
  if (!key_padding.defined()) return;
  ops_internal::check_same_device(op, x, key_padding);
  TARN_ASSERT(key_padding.numel() == batch * n, op, ": key_padding must be (B, N) = (", batch, ", ", n, "), got ",
              key_padding.shape().str());
}

// The CPU can afford to check what chunk_choose guarantees: indices in range, distinct in a row.
void check_chosen_on_cpu(const char* op, const Tensor& chosen, const ChunkAttentionDims& s) {
  if (!chosen.device().is_cpu()) return;
  const float* p = chosen.f32();
  const int64_t chunks = s.chunks();
  for (int64_t row = 0; row < chosen.numel(); row += s.top)
    for (int64_t t = 0; t < s.top; ++t) {
      const float c = p[row + t];
      TARN_ASSERT(c == static_cast<float>(static_cast<int64_t>(c)) && c >= -1 && c < chunks, op, ": chunk ", c,
                  " of ", chunks);
      for (int64_t u = 0; u < t && c >= 0; ++u) TARN_ASSERT(p[row + u] != c, op, ": chunk ", c, " chosen twice");
    }
}

}  // namespace

ChunkMeans chunk_mean(const Tensor& x, const Tensor& key_padding, int64_t chunk) {
  const char* op = "chunk_mean";
  const kernels::Backend& kb = ops_internal::kernels_for(op, x);
  TARN_ASSERT(x.dim() == 4 && chunk >= 1, op, ": expected x (B, H, N, d) and chunk >= 1, got ", x.shape().str(),
              " and ", chunk);
  ChunkAttentionDims s{x.size(0), x.size(1), 0, x.size(2), x.size(3), chunk, 1};
  check_padding(op, x, key_padding, s.batch, s.nk);
  ChunkMeans r{Tensor::empty({s.batch, s.heads, s.chunks(), s.d}, x.device()),
               Tensor::empty({s.batch, s.chunks()}, x.device())};
  kb.chunk_mean_forward(s, x.device_f32(), optional_f32(key_padding), r.mean.device_f32(), r.empty.device_f32());
  r.mean = record(op, r.mean, {x}, [x, key_padding, s, op](const Tensor& dmean, const NeedsGrad&) -> Grads {
    const kernels::Backend& kd = ops_internal::kernels_for(op, x, dmean);
    Tensor dx = Tensor::empty(x.shape(), x.device());
    kd.chunk_mean_backward(s, optional_f32(key_padding), dmean.device_f32(), dx.device_f32());
    return {dx};
  });
  return r;
}

Tensor chunk_choose(const Tensor& scores, const Tensor& empty, int64_t top) {
  const char* op = "chunk_choose";
  const kernels::Backend& kb = ops_internal::kernels_for(op, scores);
  TARN_ASSERT(scores.dim() == 4, op, ": expected scores (B, H, Nq, Nc), got ", scores.shape().str());
  const int64_t chunks = scores.size(3);
  TARN_ASSERT(top >= 1 && top <= chunks, op, ": top ", top, " of ", chunks, " chunks");
  // nk = chunks and chunk 1: the kernel's chunks() is then the score row's length.
  const ChunkAttentionDims s{scores.size(0), scores.size(1), scores.size(2), chunks, 0, 1, top};
  if (empty.defined()) {
    ops_internal::check_same_device(op, scores, empty);
    TARN_ASSERT(empty.numel() == s.batch * chunks, op, ": empty must be (B, Nc), got ", empty.shape().str());
  }
  Tensor chosen = Tensor::empty({s.batch, s.heads, s.nq, top}, scores.device());
  kb.chunk_choose(s, scores.device_f32(), optional_f32(empty), chosen.device_f32());
  return chosen;
}

namespace {

// chunk_attention, and with pick >= 1 the choice within its chunks into *picked.
Tensor read_chunks(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& chosen,
                   int64_t chunk, const Tensor& key_padding, float scale, int64_t pick, Tensor* picked) {
  const kernels::Backend& kb = ops_internal::kernels_for(op, q, k);
  ops_internal::kernels_for(op, q, v);
  ops_internal::kernels_for(op, q, chosen);
  for (const Tensor* t : {&q, &k, &v, &chosen})
    TARN_ASSERT(t->dim() == 4, op, ": expected (B, H, N, d), got ", t->shape().str());
  const ChunkAttentionDims s{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), chunk, chosen.size(3)};
  TARN_ASSERT(k.size(0) == s.batch && v.size(0) == s.batch && k.size(1) == s.heads && v.size(1) == s.heads &&
                  v.size(2) == s.nk && k.size(3) == s.d && v.size(3) == s.d && chunk >= 1,
              op, ": shapes q ", q.shape().str(), ", k ", k.shape().str(), ", v ", v.shape().str());
  TARN_ASSERT(chosen.size(0) == s.batch && chosen.size(1) == s.heads && chosen.size(2) == s.nq && s.top >= 1, op,
              ": chosen ", chosen.shape().str(), " for queries ", q.shape().str());
  check_chosen_on_cpu(op, chosen, s);
  check_padding(op, q, key_padding, s.batch, s.nk);
  Tensor out = Tensor::empty(q.shape(), q.device());
  Tensor lse = Tensor::empty({s.batch, s.heads, s.nq}, q.device());
  if (picked) {
    TARN_ASSERT(pick >= 1, op, ": pick ", pick, ": expected at least 1");
    *picked = Tensor::empty({s.batch, s.heads, s.nq, pick}, q.device());
  }
  kb.chunk_attention_forward(s, q.device_f32(), k.device_f32(), v.device_f32(), chosen.device_f32(),
                             optional_f32(key_padding), scale, out.device_f32(), lse.device_f32(), pick,
                             picked ? picked->device_f32() : nullptr);
  return record(op, out, {q, k, v}, [=](const Tensor& dout, const NeedsGrad& needs) -> Grads {
    const kernels::Backend& kd = ops_internal::kernels_for(op, q, dout);
    Tensor dq = needs[0] ? Tensor::empty(q.shape(), q.device()) : Tensor();
    Tensor dk = needs[1] ? Tensor::empty(k.shape(), k.device()) : Tensor();
    Tensor dv = needs[2] ? Tensor::empty(v.shape(), v.device()) : Tensor();
    kd.chunk_attention_backward(s, q.device_f32(), k.device_f32(), v.device_f32(), chosen.device_f32(),
                                optional_f32(key_padding), scale, out.device_f32(), lse.device_f32(),
                                dout.device_f32(), needs[0] ? dq.device_f32() : nullptr,
                                needs[1] ? dk.device_f32() : nullptr, needs[2] ? dv.device_f32() : nullptr);
    return {dq, dk, dv};
  });
}

}  // namespace

Tensor chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& chosen, int64_t chunk,
                       const Tensor& key_padding, float scale) {
  return read_chunks("chunk_attention", q, k, v, chosen, chunk, key_padding, scale, 0, nullptr);
}

ChunkReadAndChoice chunk_attention_choose(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& chosen,
                                          int64_t chunk, const Tensor& key_padding, float scale, int64_t pick) {
  ChunkReadAndChoice r;
  r.read = read_chunks("chunk_attention_choose", q, k, v, chosen, chunk, key_padding, scale, pick, &r.picked);
  return r;
}

}  // namespace tarn
