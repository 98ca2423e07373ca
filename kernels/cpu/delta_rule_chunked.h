#pragma once
// The chunked (WY) form of the gated delta rule's scan on the CPU, behind kernels/delta_rule.h's
// delta_rule_forward and delta_rule_backward (kernels/cpu/delta_rule.cpp picks it): one chunk of
// `span` tokens at a time, from the checkpoint (or zero state) before it. The
// algebra is kernels/cuda/delta_rule_chunked.cu's (the same formulas, the sub-chunk being the
// whole chunk). Same arguments as the public functions, checked there.
#include <cstdint>

#include "kernels/delta_rule.h"

namespace tarn::kernels::cpu::delta_chunked {

// `span`: the tokens a chunk of the algorithm holds, at most kMaxChunkedDeltaRuleChunk: either
// cfg.chunk (the checkpoints' chunks), or n (the whole sequence as one chunk, whatever cfg.chunk;
// the forward then computes the checkpoints' states from that chunk).

// Floats of the backward's workspace each thread takes, for any span.
int64_t backward_share(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg);

void forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t span, const float* q, const float* k,
             const float* v, const float* beta, const float* alpha, float* out, float* final_state,
             float* checkpoints, int threads);
void backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t span, const float* q, const float* k,
              const float* v, const float* beta, const float* alpha, const float* checkpoints, const float* d_out,
              const float* d_final_state, float* dq, float* dk, float* dv, float* d_beta, float* d_alpha,
              float* workspace, int threads);

}  // namespace tarn::kernels::cpu::delta_chunked
