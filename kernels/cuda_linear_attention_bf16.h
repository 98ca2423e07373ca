#pragma once
// bf16 linear attention on CUDA (kernels/cuda/linear_attention_bf16.cu): the causal chunked scan
// with its memory-linear backward, and bidirectional / cross attention, on bf16 inputs and
// outputs with f32 states, normaliser and accumulation, the chunk products on tensor cores
// (kernels/cuda/mma.cuh). Same math, shapes and semantics as kernels/linear_attention.h
// (docs/design.md section 2), with these differences:
//
//   - q, k, v, out, dout, dq, dk, dv are tarn::bf16 (kernels/emu/bf16.h: 16-bit storage,
//     layout-compatible with __nv_bfloat16); den, the key padding mask and the workspace are f32.
//   - The feature map is fused: q and k are the RAW queries and keys, phi(q), phi(k) are applied
//     on load and backward returns dq, dk (phi' chained in). identity, elu1, relu and exp
//     (exp(x - max x) per row, the max differentiated through as on the CPU) are supported;
//     favor is rejected (apply favor_forward_bf16, below, first and pass identity).
//   - The chunk is fixed (kCudaLinearAttentionBf16Chunk, 64 rows): cfg.chunk is not read. Any n_q, n_k (tail chunks padded with
//     zeros); 1 <= d, e <= 256 (tiles are padded with zeros to multiples of 16, so d and e that
//     are multiples of 16 waste nothing).
//   - Precision: the tensor-core operands are bf16 (phi(q), phi(k), v, the backward's G, the
//     masked chunk product and the state S), products and S accumulate in f32. Each rounding is
//     2^-9 relative; out and den come within a few 1e-3 of their size, the gradients within
//     what bf16 roundings of the inputs move them (tests/cuda/conformance_linear_attention_bf16_test.cpp).
//   - Every form (causal, bidirectional, cross-attention) with identity, elu1 or relu, d and e
//     multiples of 8 up to 128 and 16-byte aligned buffers runs chunk-parallel
//     (kernels/cuda/linear_attention_chunked_bf16.cu): per-chunk states in the workspace (B, H,
//     ceil(max(n_q, n_k) / 64) of them, linear in N), every chunk's outputs and gradients at
//     once, on mma.sync; the causal form reads each chunk's prefix of the states, the others
//     their total. linear_attention_bf16_set_chunk_parallel(false) sends every call to the scan
//     kernels below instead (tests, benches).
//   - Small B * H (fewer blocks than twice the SMs): the sequence is split across blocks as in
//     the f32 kernels, and linear_attention_set_sequence_split (kernels/cuda_kernels.h) forces
//     the segment count of both (clamped to the chunks of 64 rows). The split depends on the
//     device's SM count: query the workspace for the device that runs the call, after setting it.
//
// favor (kernels/cuda/linear_attention_bf16_favor.cu): favor_forward_bf16 maps bf16 x (slices,
// rows, d) to bf16 features y (slices, rows, m) with the f32 projection w (m, d) and the same
// stabilisers as kernels/feature_maps.h, computed in f32 (the f32 favor_forward on the widened
// inputs) and rounded to bf16 once; favor_backward_bf16 takes the forward's bf16 y and dy and
// writes bf16 dx. Then the attention kernels above with feature_map identity.
//
// Namespaces as in kernels/cuda_kernels.h: tarn::kernels::cuda (nvcc, TARN_WITH_CUDA) and
// tarn::kernels::cuda_emu (the emulator, tests). Buffer pointers are device memory, dims and cfg
// host memory; work goes to the default stream.
#include <cstddef>

#include "kernels/cuda_api.h"
#include "kernels/emu/bf16.h"
#include "kernels/feature_maps.h"
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
//   When the sequence is split across blocks, both add B * H * segments * d * (e + 1) floats
//   of segment states (at most one segment per 2 chunks of 64 rows: still linear in N).
// favor workspaces (f32 copies of the operands): forward slices * rows * (d + m), backward
// slices * rows * 2 (d + m) plus favor_backward_workspace_floats.
namespace tarn::kernels {
constexpr int64_t kCudaLinearAttentionBf16Chunk = 64;  // rows per chunk of the bf16 causal scan
}  // namespace tarn::kernels

#define TARN_CUDA_LINEAR_ATTENTION_BF16_API                                                                         \
  using cpu::LinearAttentionConfig;                                                                                 \
  using cpu::LinearAttentionDims;                                                                                   \
  TARN_CUDA_ATTENTION_PASSES(linear_attention_bf16, LinearAttentionDims, LinearAttentionConfig, ::tarn::bf16)  \
  void linear_attention_bf16_set_chunk_parallel(bool enabled);                                                     \
  size_t favor_forward_bf16_workspace_floats(const cpu::FavorDims& dims);                                           \
  void favor_forward_bf16(const cpu::FavorDims& dims, cpu::FavorStabilizer stab, const ::tarn::bf16* x,             \
                          const float* w, ::tarn::bf16* y, float* workspace, size_t workspace_floats);              \
  size_t favor_backward_bf16_workspace_floats(const cpu::FavorDims& dims);                                          \
  void favor_backward_bf16(const cpu::FavorDims& dims, cpu::FavorStabilizer stab, const ::tarn::bf16* x,            \
                           const float* w, const ::tarn::bf16* y, const ::tarn::bf16* dy, ::tarn::bf16* dx,         \
                           float* workspace, size_t workspace_floats);

TARN_DECLARE_CUDA_API(TARN_CUDA_LINEAR_ATTENTION_BF16_API)

#undef TARN_CUDA_LINEAR_ATTENTION_BF16_API
