#pragma once
// Softmax attention of each query over the keys of a few chosen chunks of the keys (routed
// cross-attention's selected read, layers/attention/routed.h), on raw row-major buffers:
// q (BH, nq, d), k and v (BH, nk, d) with BH = batch x heads, `chosen` (BH, nq, top) chunk
// indices (-1: none; the others distinct within a row), chunk c holding keys
// [c chunk, min(nk, (c + 1) chunk)):
//
//   out[i] = Σ_{j in chosen chunks, not padded} softmax_j(scale q_i·k_j) v_j
//
// Work O(BH nq top chunk d) whatever nk: the keys of other chunks are never read. A query with
// no visible key gets zeros (lse = -inf). `padded` (batch, nk), nonzero = padding, may be null.
// Backward from out, lse and dout: dq, dk and dv (each may be null), dk and dv summed over the
// queries in order; parallel over BH (OpenMP), so the sums do not depend on the thread count.
#include <cstdint>

namespace tarn::kernels::cpu {

struct ChunkAttentionDims {
  int64_t batch = 1, heads = 1, nq = 0, nk = 0, d = 0, chunk = 1, top = 1;
};

void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const int32_t* chosen, const float* padded, float scale, float* out, float* lse);
void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                              const int32_t* chosen, const float* padded, float scale, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dv);

}  // namespace tarn::kernels::cpu
