#pragma once
// The gated delta rule's scan (kernels/delta_rule.h) in bf16 on CUDA
// (kernels/cuda/delta_rule_chunked_bf16.cu): the chunked (WY) algorithm of
// kernels/cuda/delta_rule_chunked.cu with its sub-chunks' matrix products on tensor cores
// (kernels/cuda/mma.cuh). Same semantics, shapes, layouts, checkpoints and argument order as
// kernels/cuda_delta_rule.h's delta_rule_forward and delta_rule_backward, with these differences:
//
//   - q, k, v, out (and in the backward d_out, dq, dk, dv) are tarn::bf16 (kernels/emu/bf16.h:
//     16-bit storage, layout-compatible with __nv_bfloat16); beta, alpha, final_state,
//     checkpoints, d_final_state, d_beta, d_alpha and the workspace are f32. States are kept and
//     accumulated in f32, and every sum runs in f32.
//   - Precision: the tensor-core operands are bf16 (k, q, v, d_out as given, and the rounded
//     state, writes W, the factors Khat, P, T and X, and the backward's dW, dY, dP, dA): each
//     rounding is 2^-9 relative. The substitutions of the (I + A) triangle run in f32 on the
//     CUDA cores, once per sub-chunk, outside the sequential passes. Outputs come within a
//     few 1e-3 of their size, gradients within what bf16 roundings of the inputs move them
//     (tests/cuda/conformance_delta_rule_bf16_test.cpp).
//   - Always chunked: sub-chunks of min(32, chunk) tokens where the shared memory fits, else of
//     min(16, chunk); the products run on tiles padded with zeros to multiples of 16 (tokens, dk
//     and value columns), so dk and dv that are multiples of 16 waste nothing. When even 16
//     does not fit (dk, dv far above 128) the calls throw: delta_rule_bf16_sub_chunk says 0.
//   - Shared memory a block (bytes, with the alignment slack): at dk = dv = 64 and 32-token
//     sub-chunks, factors 63,984, state pass 28,656, outputs 65,008, state gradients 38,384,
//     the per-sub-chunk gradients 162,544 (within sm_80's 163 KiB opt-in); with 16-token
//     sub-chunks 26,096 / 17,648 / 35,824 / 21,488 / 82,672. At dk = dv = 128 the gradients
//     kernel needs 183,024 even with 16 (sm_90's 227 KiB only).
//   - Deterministic: the same bits on every run (each tile and each sum has one owner and a
//     fixed order), not the same bits as the f32 kernels.
//
// Workspaces: delta_rule_bf16_forward_workspace_floats(dims, cfg) floats of device memory for
// the forward, delta_rule_bf16_backward_workspace_floats(dims, cfg) for the backward (the larger),
// both linear in n: per sub-chunk the state before it (f32) and its factors U (c x dv f32),
// Khat (c x dk bf16) and P (c x c bf16); the backward's also the gradient of the state after it
// (f32) and T (c x c bf16), c the sub-chunk rounded up to 16. At dk = dv = 64 and 32-token
// sub-chunks: 30,720 bytes a sub-chunk forward, 49,152 backward (960 and 1,536 per token).
//
// Namespaces as in kernels/cuda_kernels.h: tarn::kernels::cuda (nvcc, TARN_WITH_CUDA) and
// tarn::kernels::cuda_emu (the emulator, tests). Buffer pointers are device memory, dims and cfg
// host memory; work goes to the default stream.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda_api.h"
#include "kernels/delta_rule.h"
#include "kernels/emu/bf16.h"

#define TARN_CUDA_DELTA_RULE_BF16_API                                                                              \
  /* Tokens a sub-chunk on the current device (0: dk, dv too large for the shared memory). */                     \
  int64_t delta_rule_bf16_sub_chunk(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg);              \
  size_t delta_rule_bf16_forward_workspace_floats(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg);  \
  size_t delta_rule_bf16_backward_workspace_floats(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg); \
  void delta_rule_bf16_forward(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg,                   \
                               const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,               \
                               const float* beta, const float* alpha, ::tarn::bf16* out, float* final_state,      \
                               float* checkpoints, float* workspace, size_t workspace_floats);                    \
  void delta_rule_bf16_backward(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg,                  \
                                const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,              \
                                const float* beta, const float* alpha, const float* checkpoints,                  \
                                const ::tarn::bf16* d_out, const float* d_final_state, ::tarn::bf16* dq,          \
                                ::tarn::bf16* dk, ::tarn::bf16* dv, float* d_beta, float* d_alpha,                \
                                float* workspace, size_t workspace_floats);

TARN_DECLARE_CUDA_API(TARN_CUDA_DELTA_RULE_BF16_API)

#undef TARN_CUDA_DELTA_RULE_BF16_API
