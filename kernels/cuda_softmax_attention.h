#pragma once
// Softmax attention on CUDA (kernels/cuda/softmax_attention.cu): the entry points of
// kernels/softmax_attention.h on device buffers, FlashAttention-2 style, in the two namespaces
// that kernels/cuda_kernels.h describes:
//   tarn::kernels::cuda      nvcc's build (tarn_kernels_cuda; only when TARN_WITH_CUDA)
//   tarn::kernels::cuda_emu  g++'s build against the CUDA emulator (tarn_kernels_emu, tests)
// Same semantics, shapes and argument order as the CPU functions: q (B,H,Nq,d), k (B,H,Nk,d),
// v (B,H,Nk,e), out (B,H,Nq,e), lse (B,H,Nq), key_padding_mask (B,Nk) (device memory, nonzero =
// padded); a query that sees no key gets out = 0 and lse = +inf. Limits: 1 <= d, e <= 128.
// cfg.block_q and cfg.block_k are the CPU's blocking and are ignored here (the tiles are fixed
// per kernel, see the .cu). The forward needs no workspace (0 floats); the backward's workspace
// is D = rowsum(dO o O), (B, H, Nq) floats. No float atomics: every gradient element is summed
// by one thread in a fixed order, so results are the same bits on every run.
#include <cstddef>

#include "kernels/cuda_api.h"
#include "kernels/softmax_attention.h"

#define TARN_CUDA_SOFTMAX_ATTENTION_API                                                                           \
  using cpu::SoftmaxAttentionConfig;                                                                              \
  using cpu::SoftmaxAttentionDims;                                                                                \
  TARN_CUDA_ATTENTION_PASSES(softmax_attention, SoftmaxAttentionDims, SoftmaxAttentionConfig, float)

TARN_DECLARE_CUDA_API(TARN_CUDA_SOFTMAX_ATTENTION_API)

#undef TARN_CUDA_SOFTMAX_ATTENTION_API
