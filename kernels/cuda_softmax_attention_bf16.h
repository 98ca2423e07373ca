#pragma once
// bf16 softmax attention on CUDA (kernels/cuda/softmax_attention_bf16.cu): FlashAttention-2 style
// forward and backward with the four products of each tile (S = Q K^T, O += P V, dP = dO V^T,
// dV/dK/dQ) on tensor cores (kernels/cuda/mma.cuh), for training.precision bf16. Same math,
// shapes and semantics as kernels/softmax_attention.h, with these differences:
//
//   - q, k, v, out, dout, dq, dk, dv are tarn::bf16 (kernels/emu/bf16.h, layout-compatible with
//     __nv_bfloat16); lse, the key padding mask and the workspace are f32.
//   - Precision: the scores, the online softmax (row max, row sum, rescaling), lse, D =
//     rowsum(dO o O) and every accumulation are f32; the tensor-core operands are bf16: q, k, v,
//     dout as given, and P and dS rounded once per tile. out and the gradients are stored as bf16.
//   - 1 <= d, e <= 128 (tiles padded with zeros to multiples of 16).
//   - Deterministic as the f32 kernels: dK, dV by one block per key tile, dQ by one block per
//     query tile, no atomics.
//
// Workspaces in floats of device memory: forward 0; backward D, (B, H, Nq), as the f32 kernels.
// Namespaces as in kernels/cuda_kernels.h: tarn::kernels::cuda (nvcc, TARN_WITH_CUDA) and
// tarn::kernels::cuda_emu (the emulator, tests). Pointers are device memory, dims and cfg host
// memory; work goes to the default stream.
#include <cstddef>

#include "kernels/cuda_api.h"
#include "kernels/emu/bf16.h"
#include "kernels/softmax_attention.h"

#define TARN_CUDA_SOFTMAX_ATTENTION_BF16_API                                                                      \
  using cpu::SoftmaxAttentionConfig;                                                                              \
  using cpu::SoftmaxAttentionDims;                                                                                \
  TARN_CUDA_ATTENTION_PASSES(softmax_attention_bf16, SoftmaxAttentionDims, SoftmaxAttentionConfig, ::tarn::bf16)

TARN_DECLARE_CUDA_API(TARN_CUDA_SOFTMAX_ATTENTION_BF16_API)

#undef TARN_CUDA_SOFTMAX_ATTENTION_BF16_API
