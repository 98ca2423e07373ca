#pragma once
// The gated delta rule (kernels/delta_rule.h) and its short causal convolution
// (kernels/causal_conv.h) on CUDA (kernels/cuda/delta_rule.cu, kernels/cuda/causal_conv.cu), in
// the two namespaces that kernels/cuda_kernels.h describes. Same semantics, shapes, layouts
// (checkpoints included) and argument order as the CPU functions.
//
// Two algorithms run the scan; delta_rule_set_algorithm picks one (automatic: chunked wherever its
// shared memory fits, which at dk, dv <= 64 it does on every GPU since sm_80; recurrent otherwise):
//   recurrent (kernels/cuda/delta_rule.cu): the CPU's token-by-token recurrence, parallel over
//     (slice, value column): column j of the state, S[:, j], evolves on its own (u_j = S[:, j] . k,
//     w_j = beta (v_j - alpha u_j)), so one thread owns it and the forward needs no barrier at
//     all. The backward runs one block per slice: each thread recomputes its column's states of a
//     chunk from the checkpoint into the workspace, then walks the chunk backwards; the gradients
//     that sum over columns (dq, dk, d_beta, d_alpha) go through shared memory, summed in column
//     order.
//   chunked (kernels/cuda/delta_rule_chunked.cu): DeltaNet's WY form, turning up to 32 tokens at
//     a time into matrix products in shared memory (f32, on the CUDA cores; the bf16 variant
//     with its products on tensor cores is kernels/cuda_delta_rule_bf16.h). Only the state's pass over the sub-chunks runs in order, a
//     block per (slice, tile of 16 state columns); the backward's gradients run a block per
//     (slice, sub-chunk), all at once. Its sums run in another order than the recurrence's: its
//     results differ from the CPU's within f32 rounding, not bit for bit.
// Both give the same bits on every run. The decoding step is always the recurrence.
//
// Workspace of the backward (device memory): delta_rule_backward_workspace_floats(dims, cfg),
// enough for either algorithm: the recurrent kernels keep up to min(chunk, n) + 1 states a
// slice, the chunked ones two a sub-chunk (the state before it and the gradient of the one
// after), 2 ceil(n / chunk) ceil(chunk / C) states a slice. Both are linear in n.
// Limits: recurrent, dv <= 1024 (one block holds a slice's columns) and the backward's shared
// memory, 4 (3 dk + 3) bytes a column, columns rounded up to whole warps, within the device's
// opt-in limit (dk = dv = 64: 49,920 bytes, above the default 48 KiB: the kernel opts in);
// chunked, two states and a sub-chunk's matrices in shared memory (dk = dv = 64: 141 KiB with
// 32-token sub-chunks, 77 KiB with 16, 51 KiB with 8: the largest that fits is used).
#include <cstddef>
#include <cstdint>

#include "kernels/causal_conv.h"
#include "kernels/cuda_api.h"
#include "kernels/delta_rule.h"

#define TARN_CUDA_DELTA_RULE_API                                                                                 \
  using cpu::CausalConvDims;                                                                                     \
  using cpu::DeltaRuleConfig;                                                                                    \
  using cpu::DeltaRuleDims;                                                                                      \
  size_t delta_rule_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg);           \
  void delta_rule_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q, const float* k, \
                          const float* v, const float* beta, const float* alpha, float* out, float* final_state,  \
                          float* checkpoints);                                                                   \
  void delta_rule_backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q,                \
                           const float* k, const float* v, const float* beta, const float* alpha,                \
                           const float* checkpoints, const float* d_out, const float* d_final_state, float* dq,  \
                           float* dk, float* dv, float* d_beta, float* d_alpha, float* workspace,                \
                           size_t workspace_floats);                                                             \
  void delta_rule_step(int64_t slices, int64_t dk, int64_t dv, float* state, const float* q, const float* k,     \
                       const float* v, const float* beta, const float* alpha, float* out, bool erase);           \
  /* The algorithm of the scans from now on (process-wide; chunked throws where it does not fit). */            \
  void delta_rule_set_algorithm(DeltaRuleAlgorithm algorithm);                                                  \
  /* The chunked kernels' sub-chunk on the current device (tokens turned into products at once; 0: no fit). */   \
  int64_t delta_rule_sub_chunk(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg);                          \
  void causal_conv_forward(const CausalConvDims& d, const float* x, const float* w, float* y);                   \
  void causal_conv_backward(const CausalConvDims& d, const float* x, const float* w, const float* dy, float* dx,  \
                            float* dw);

TARN_DECLARE_CUDA_API(TARN_CUDA_DELTA_RULE_API)

#undef TARN_CUDA_DELTA_RULE_API
