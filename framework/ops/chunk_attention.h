#pragma once
// Routed cross-attention's chunk ops, with autograd where they have a gradient
// (kernels/chunk_attention.h: the CPU kernels; kernels/cuda_chunk_attention.h: CUDA): the chunks'
// mean rows (landmarks), the choice of each query's best chunks, and softmax attention over the
// keys of the chosen chunks (layers/attention/routed.h). Chunk indices are f32 integers, -1 for
// none. Every result stays on its inputs' device: no host round trip.
#include <cstdint>

#include "framework/tensor.h"

namespace tarn {

struct ChunkMeans {
  Tensor mean;   // (B, H, Nc, d), with autograd to x
  Tensor empty;  // (B, Nc): 1 where a chunk holds padding only (its mean is 0), else 0
};

// x (B, H, N, d); key_padding (B, N) f32, 1 = padded, or undefined. Nc = ceil(N / chunk).
ChunkMeans chunk_mean(const Tensor& x, const Tensor& key_padding, int64_t chunk);

// scores (B, H, Nq, Nc); empty (B, Nc) or undefined -> (B, H, Nq, top) chunk indices, highest
// score first, equal scores to the earlier chunk, flagged chunks never, -1 past the chunks there
// are; top <= Nc. No gradient.
Tensor chunk_choose(const Tensor& scores, const Tensor& empty, int64_t top);

// q (B, H, Nq, d), k and v (B, H, Nk, d); chosen (B, H, Nq, top) chunk indices, -1 for none, the
// others distinct within a row (chunk_choose gives them; checked on the CPU: on CUDA a check
// would wait for the device); chunk c holds keys [c chunk, (c + 1) chunk). key_padding: (B, Nk)
// f32, 1 = padded, or undefined. Returns (B, H, Nq, d); a query with no visible key gets zeros.
Tensor chunk_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& chosen, int64_t chunk,
                       const Tensor& key_padding, float scale);

// One level down a tree of landmarks (k, v: a level's landmarks; chosen: the parents the level
// above chose): chunk_attention's read, and from the same scores the next choice, (B, H, Nq,
// pick): of the rows of each query's chosen chunks not flagged in key_padding, the `pick` whose
// scale q·k is highest, highest first, equal scores to the lower row, -1 past the candidates
// there are. The choice has no gradient.
struct ChunkReadAndChoice {
  Tensor read;    // as chunk_attention returns it
  Tensor picked;  // (B, H, Nq, pick) row indices of k
};
ChunkReadAndChoice chunk_attention_choose(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& chosen,
                                          int64_t chunk, const Tensor& key_padding, float scale, int64_t pick);

}  // namespace tarn
