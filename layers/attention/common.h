#pragma once
// What several attention kinds compute alike (layers/attention/kind.h): padding masks as the
// ops take them, linear attention's ones column and normalisation, and the per-head gate that
// mixes two reads (hybrid's window and global part, aligned cross-attention's decayed and plain
// reads).
#include <cstdint>
#include <memory>
#include <string>

#include "layers/attention/kind.h"
#include "layers/linear.h"

namespace tarn {

// (B, N) flags -> (B, N) f32 tensor, 1 = padded, as the attention ops take it; undefined when
// `pad` is empty.
Tensor padding_tensor(const PaddingMask& pad, int64_t batch, int64_t length, Device device = Device::cpu());
// (B, N) flags -> (B, 1, N) f32, 1 = padded (broadcasts over heads); undefined when none.
Tensor padding_rows(const PaddingMask& pad, int64_t batch, int64_t length, Device device);
// (B, 1, N, 1) on `device`: 1 for real keys, 0 for padding (zeroes padded rows of φ(K),
// docs/design.md section 2); the batch's staged copy when there is one (framework/staging.h).
Tensor key_keep(int64_t batch, int64_t nk, const PaddingMask& pad, Device device);
void check_padding(const char* what, const PaddingMask& pad, int64_t batch, int64_t length);
// The kinds whose cross-attention reads around the target position decode one query row at a
// known position; `what` names the kind in the message.
void check_one_row_at_position(const char* what, const Tensor& q, int64_t position);

// [v | 1]: (B, H, N, e) -> (B, H, N, e + 1); the ones column makes the normaliser one more
// output column of the same products (docs/design.md section 2).
Tensor append_ones(const Tensor& v);
// out = num / (den + eps) from U = [num | den], (B, H, N, e + 1) -> (B, H, N, e).
Tensor normalise(const Tensor& u, float eps);

// g a + (1 - g) b with g = σ(x W_g^T + b_g) per head and position: W_g (H, D) and b_g (H),
// registered on the module as `name` ("hybrid_gate", "align_gate"); b_g starts at `initial_bias`.
class HeadGate {
 public:
  HeadGate(AttentionSite& site, const std::string& name, float initial_bias = 0.0f);
  // a, b (B, H, N, e); x (B, N, D), the layer's query input.
  Tensor mix(const Tensor& a, const Tensor& b, const Tensor& x) const;

 private:
  std::unique_ptr<Linear> proj_;
  int64_t heads_;
};

}  // namespace tarn
