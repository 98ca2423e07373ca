#pragma once
// The chunk-parallel linear attention in bf16 (kernels/cuda/linear_attention_chunked_bf16.cu),
// which linear_attention_bf16.cu runs for every form (causal, bidirectional, cross-attention)
// with an elementwise feature map when the shapes allow it (chunked_bf16::supported). Inside the CUDA namespace only: the public entry
// points stay those of kernels/cuda_linear_attention_bf16.h.
#include <cstddef>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/emu/bf16.h"
#include "kernels/linear_attention.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace chunked_bf16 {

// Whether the chunk-parallel kernels take this call: identity / elu1 / relu (causal,
// bidirectional or cross-attention), d and e
// multiples of 8 up to 128, and q, k, v (and, for backward, out, dout and the gradients)
// 16-byte aligned, and set_enabled has not turned them off. `pointers` are those of the call
// (the workspace among them).
bool supported(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg,
               std::initializer_list<const void*> pointers);

// linear_attention_bf16_set_chunk_parallel (kernels/cuda_linear_attention_bf16.h).
void set_enabled(bool enabled);

// Workspace in floats (forward and backward alike): the per-chunk states.
size_t workspace_floats(const cpu::LinearAttentionDims& dims);

void forward(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, const ::tarn::bf16* q,
             const ::tarn::bf16* k, const ::tarn::bf16* v, ::tarn::bf16* out, float* den, float* workspace);

void backward(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, const ::tarn::bf16* q,
              const ::tarn::bf16* k, const ::tarn::bf16* v, const ::tarn::bf16* out, const float* den,
              const ::tarn::bf16* dout, ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* workspace);

}  // namespace chunked_bf16
}  // namespace tarn::kernels::TARN_CUDA_NS
