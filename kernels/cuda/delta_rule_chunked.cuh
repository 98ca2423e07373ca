#pragma once
// The gated delta rule's scan in chunked (WY) form on CUDA, the other algorithm behind
// kernels/cuda_delta_rule.h's delta_rule_forward and delta_rule_backward (kernels/cuda/delta_rule.cu
// picks one; kernels/cuda/delta_rule_chunked.cu has the algebra). Same semantics, shapes,
// layouts and checkpoints as the CPU kernels; its sums run in another order than the
// recurrence's, so its bits differ from it within f32 rounding.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch.cuh"  // TARN_CUDA_NS
#include "kernels/delta_rule.h"

namespace tarn::kernels::TARN_CUDA_NS::delta_chunked {

// The sub-chunk the kernels would use on this device for these dims (tokens a block turns into
// matrix products at once), or 0 when its shared memory does not fit: then the recurrent kernels
// run.
int64_t sub_chunk(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg);

// The chunked backward's workspace for sub-chunks of c tokens: two states (the state before and
// the gradient of the state after) per sub-chunk of the sequence, slices * 2 * ceil(n / chunk) *
// ceil(chunk / c) * dk * dv floats.
size_t backward_workspace_floats(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg, int64_t c);

// As kernels/delta_rule.h's, with c = sub_chunk(dims, cfg) > 0 (the caller's, so that the device
// is asked once) and a workspace of at least backward_workspace_floats(dims, cfg, c) floats.
void forward(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg, int64_t c, const float* q,
             const float* k, const float* v, const float* beta, const float* alpha, float* out, float* final_state,
             float* checkpoints, int64_t per_slice_checkpoints);
void backward(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg, int64_t c, const float* q,
              const float* k, const float* v, const float* beta, const float* alpha, const float* checkpoints,
              const float* d_out,
              const float* d_final_state, float* dq, float* dk, float* dv, float* d_beta, float* d_alpha,
              float* workspace, int64_t per_slice_checkpoints);

}  // namespace tarn::kernels::TARN_CUDA_NS::delta_chunked
