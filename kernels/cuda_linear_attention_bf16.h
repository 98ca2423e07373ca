#pragma once
// bf16 linear attention on CUDA (kernels/cuda/linear_attention_bf16.cu): the causal chunked scan
// with its memory-linear backward, and bidirectional / cross attention, on bf16 inputs and
// outputs with f32 states, normaliser and accumulation, the chunk products on tensor cores
// (kernels/cuda/mma.cuh). Same math, shapes and semantics as kernels/linear_attention.h
// (DESIGN.md section 2), with these differences:
//
//   - q, k, v, out, dout, dq, dk, dv are tarn::bf16 (kernels/emu/bf16.h: 16-bit storage,
//     layout-compatible with __nv_bfloat16); den, the key padding mask and the workspace are f32.
//   - The feature map is fused: q and k are the RAW queries and keys, phi(q), phi(k) are applied
//     on load and backward returns dq, dk (phi' chained in). identity, elu1, relu and exp
//     (exp(x - max x) per row, the max differentiated through as on the CPU) are supported;
//     favor is rejected (apply favor_forward first and pass identity).
//   - The chunk is fixed (64 rows): cfg.chunk is ignored. Any n_q, n_k (tail chunks padded with
//     zeros); 1 <= d, e <= 256 (tiles are padded with zeros to multiples of 16, so d and e that
//     are multiples of 16 waste nothing).
//   - Precision: the tensor-core operands are bf16 (phi(q), phi(k), v, the backward's G, the
//     masked chunk product and the state S), products and S accumulate in f32. Each rounding is
//     2^-9 relative; out and den come within a few 1e-3 of their size, the gradients within
//     what bf16 roundings of the inputs move them (tests/cuda/conformance_linear_attention_bf16_test.cpp).
//
// Namespaces as in kernels/cuda_kernels.h: tarn::kernels::cuda (nvcc, TARN_WITH_CUDA) and
// tarn::kernels::cuda_emu (the emulator, tests). Buffer pointers are device memory, dims and cfg
// host memory; work goes to the default stream.
#include <cstddef>

#include "kernels/emu/bf16.h"
#include "kernels/linear_attention.h"

// Workspaces, in floats of device memory (the caller allocates at least this many):
//   forward   (B, H, Nq, e + 1): [num | den] before normalising
//   backward  (B, H, Nq, e + 1): G = [dO / (den + eps) | -(dO . out) / (den + eps)]
//   with the exp map, both also hold the rows' maxima of q and k (B, H, Nq + Nk), and backward
//   an f32 (B, H, max(Nq, Nk), d) for dL/dphi before the exp map's row-wise backward.
// All are linear in N: the backward recomputes the chunk states instead of keeping them.
//
// forward: q (B,H,Nq,d), k (B,H,Nk,d), v (B,H,Nk,e) -> out (B,H,Nq,e) bf16, den (B,H,Nq) f32.
// backward: from dout (B,H,Nq,e) and the forward's out and den, dq (B,H,Nq,d), dk (B,H,Nk,d),
//   dv (B,H,Nk,e), each may be null when not wanted; overwritten, not accumulated. Padded keys
//   get dk = dv = 0.
#define TARN_CUDA_LINEAR_ATTENTION_BF16_API                                                                         \
  using cpu::LinearAttentionConfig;                                                                                 \
  using cpu::LinearAttentionDims;                                                                                   \
  size_t linear_attention_bf16_forward_workspace_floats(const LinearAttentionDims& dims,                            \
                                                        const LinearAttentionConfig& cfg);                          \
  void linear_attention_bf16_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,             \
                                     const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,            \
                                     ::tarn::bf16* out, float* den, float* workspace, size_t workspace_floats);     \
  size_t linear_attention_bf16_backward_workspace_floats(const LinearAttentionDims& dims,                           \
                                                         const LinearAttentionConfig& cfg);                         \
  void linear_attention_bf16_backward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,            \
                                      const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,           \
                                      const ::tarn::bf16* out, const float* den, const ::tarn::bf16* dout,           \
                                      ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* workspace,        \
                                      size_t workspace_floats);

namespace tarn::kernels::cuda {
TARN_CUDA_LINEAR_ATTENTION_BF16_API
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
TARN_CUDA_LINEAR_ATTENTION_BF16_API
}  // namespace tarn::kernels::cuda_emu

#undef TARN_CUDA_LINEAR_ATTENTION_BF16_API
