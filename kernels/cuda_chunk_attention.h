#pragma once
// Routed cross-attention's chunk kernels (kernels/chunk_attention.h) on CUDA
// (kernels/cuda/chunk_attention.cu), in the two namespaces that kernels/cuda_kernels.h describes:
// the same semantics, shapes and argument order as the CPU functions, and the same sums in the
// same order where the CPU fixes one (dk and dv over the queries in order). Refused: top (and
// chunk_attention's pick) above kChunkMaxTop, top x chunk above kChunkMaxKeys (the keys one
// query reads, scored in shared memory), nk at or above 2^31, and chunk x d above 4,096 in the
// backward (a chunk's dk and dv rows in shared memory). Chunk indices outside [0, chunks) count
// as none (the CPU op checks them; here a check would wait for the device).
#include "kernels/chunk_attention.h"
#include "kernels/cuda_api.h"

namespace tarn::kernels {
constexpr int64_t kChunkMaxTop = 64;
constexpr int64_t kChunkMaxKeys = 1024;
}  // namespace tarn::kernels

#define TARN_CUDA_CHUNK_ATTENTION_API                                                                              \
  using cpu::ChunkAttentionDims;                                                                                   \
  void chunk_mean_forward(const ChunkAttentionDims& s, const float* x, const float* padded, float* mean,           \
                          float* empty);                                                                           \
  void chunk_mean_backward(const ChunkAttentionDims& s, const float* padded, const float* dmean, float* dx);       \
  void chunk_choose(const ChunkAttentionDims& s, const float* scores, const float* empty, float* chosen);          \
  void chunk_attention_forward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,        \
                               const float* chosen, const float* padded, float scale, float* out, float* lse,      \
                               int64_t pick, float* picked);                                                       \
  void chunk_attention_backward(const ChunkAttentionDims& s, const float* q, const float* k, const float* v,       \
                                const float* chosen, const float* padded, float scale, const float* out,           \
                                const float* lse, const float* dout, float* dq, float* dk, float* dv);

TARN_DECLARE_CUDA_API(TARN_CUDA_CHUNK_ATTENTION_API)

#undef TARN_CUDA_CHUNK_ATTENTION_API
