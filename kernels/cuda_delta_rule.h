#pragma once
// The gated delta rule (kernels/delta_rule.h) and its short causal convolution
// (kernels/causal_conv.h) on CUDA (kernels/cuda/delta_rule.cu, kernels/cuda/causal_conv.cu), in
// the two namespaces that kernels/cuda_kernels.h describes. Same semantics, shapes, layouts
// (checkpoints included) and argument order as the CPU functions.
//
// The scan is the CPU's token-by-token recurrence, parallel over (slice, value column): column j
// of the state, S[:, j], evolves on its own (u_j = S[:, j] . k, w_j = beta (v_j - alpha u_j)), so
// one thread owns it and the forward and the decoding step need no barrier at all. The backward
// runs one block per slice: each thread recomputes its column's states of a chunk from the
// checkpoint into the workspace, then walks the chunk backwards; the gradients that sum over
// columns (dq, dk, d_beta, d_alpha) go through shared memory and are summed in column order, so
// results are the same bits on every run. The chunked WY form on tensor cores is not written.
//
// Workspace of the backward (device memory): delta_rule_backward_workspace_floats(dims, cfg),
// slices * (min(chunk, n) + 1) * dk * dv floats: at most chunk + 1 states a slice whatever n, so
// memory stays linear in n.
// Limits: dv <= 1024 (one block holds a slice's columns); the backward's shared memory,
// 4 (3 dk + 3) bytes a column, columns rounded up to whole warps, must fit the device's opt-in
// limit (dk = dv = 64: 49,920 bytes, above the default 48 KiB: the kernel opts in).
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
  void causal_conv_forward(const CausalConvDims& d, const float* x, const float* w, float* y);                   \
  void causal_conv_backward(const CausalConvDims& d, const float* x, const float* w, const float* dy, float* dx,  \
                            float* dw);

TARN_DECLARE_CUDA_API(TARN_CUDA_DELTA_RULE_API)

#undef TARN_CUDA_DELTA_RULE_API
