#pragma once
// Routed cross-attention's kernels (layers/attention/routed.h) on raw row-major buffers, with
// BH = batch x heads: the source's rows (keys or values, (BH, nk, d)) are cut into chunks of
// `chunk` rows, chunk c holding rows [c chunk, min(nk, (c + 1) chunk)), nc = ceil(nk / chunk)
// chunks. `padded` (batch, nk), nonzero = padding, may be null (no padding). Chunk indices travel
// as f32 integers (tarn's tensors are floating point): -1 is "none".
//
// chunk_mean: each chunk's mean over its visible rows (landmarks), (BH, nc, d), and
//   `empty` (batch, nc): 1 where a chunk holds padding only (its mean is then 0), else 0.
//   Backward: dx[j] = dmean[chunk of j] / (visible rows of that chunk), 0 for padding.
//
// chunk_choose: for each row of `scores` (BH, nq, nc), the `top` chunks with the highest scores,
//   highest first, equal scores to the earlier chunk, never one flagged in `empty` (may be null);
//   -1 past the chunks there are. No gradient: the choice is discrete.
//
// chunk_attention: softmax attention of each query over the keys of its chosen chunks,
//   q (BH, nq, d), k and v (BH, nk, d), chosen (BH, nq, top) (the others distinct within a row):
//
//     out[i] = Σ_{j in chosen chunks, not padded} softmax_j(scale q_i·k_j) v_j
//
//   Work O(BH nq top chunk d) whatever nk: the keys of other chunks are never read. A query with
//   no visible key gets zeros (lse = -inf). Backward from out, lse and dout: dq, dk and dv (each
//   may be null), dk and dv summed over the queries in order, so the sums do not depend on the
//   thread count (CPU: OpenMP over BH, chunk-major in a head; CUDA: kernels/cuda_chunk_attention.h).
//
//   With `picked` (BH, nq, pick) not null, the forward also takes a step down a tree of
//   landmarks from the scores it computed: of each query's candidates, the visible rows of its
//   chosen chunks (the parents), the `pick` whose scale q·k scores highest, highest first, equal
//   scores to the lower row, -1 past the candidates there are. A tree's level reads the children
//   of the chunks chosen above and chooses among the same children (layers/attention/routed.h):
//   one pass scores them once, where a read and then a choice scored them twice. No gradient:
//   the choice is discrete.
#include <cstdint>

#include "kernels/host_device.h"

namespace tarn::kernels::cpu {

struct ChunkAttentionDims {
  int64_t batch = 1, heads = 1, nq = 0, nk = 0, d = 0, chunk = 1, top = 1;
  TARN_HOST_DEVICE int64_t chunks() const { return (nk + chunk - 1) / chunk; }
};

// chunk_mean reads batch, heads, nk, d and chunk.
void chunk_mean_forward(const ChunkAttentionDims& s, const float* x, const float* padded, float* mean, float* empty);
void chunk_mean_backward(const ChunkAttentionDims& s, const float* padded, const float* dmean, float* dx);

// chunk_choose reads batch, heads, nq, nk, chunk and top (top <= chunks()).
void chunk_choose(const ChunkAttentionDims& s, const float* scores, const float* empty, float* chosen);

// How the CPU's chunk_attention cuts its work (kernels/cpu/chunk_attention.cpp): a head's
// queries in blocks whose scores fit score_floats (a thread's buffer), and a chunk's queries of a
// block in GEMM tiles of tile_rows. Set returns the previous values. For tests: small values make
// many blocks and tiles of a few queries.
struct ChunkTuning {
  int64_t score_floats = int64_t{1} << 20;  // 4 MiB
  int64_t tile_rows = 128;
};
ChunkTuning set_chunk_tuning(ChunkTuning t);

// chunk_attention reads every field; `picked` may be null (then pick is not read).
void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                             const float* chosen, const float* padded, float scale, float* out, float* lse,
                             int64_t pick, float* picked);
void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,
                              const float* chosen, const float* padded, float scale, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dv);

}  // namespace tarn::kernels::cpu
