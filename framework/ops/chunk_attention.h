#pragma once
// Softmax attention of each query over the keys of a few chosen chunks, with autograd
// (kernels/chunk_attention.h): routed cross-attention's selected read (layers/attention/routed.h).
// On the CPU only; a caller on another device composes the same read from softmax_attention's
// pieces (layers/attention/routed.cpp).
#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

// q (B, H, Nq, d), k and v (B, H, Nk, d) on the CPU; chosen (B, H, Nq, top) chunk indices, -1 for
// none, the others distinct within a row; chunk c holds keys [c chunk, (c + 1) chunk). key_padding: (B, Nk) f32, 1 = padded, or
// undefined. Returns (B, H, Nq, d); a query with no visible key gets zeros.
Tensor chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::vector<int32_t> chosen, int64_t chunk,
                       int64_t top, const Tensor& key_padding, float scale);

}  // namespace tarn
