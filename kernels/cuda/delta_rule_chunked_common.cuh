#pragma once
// What the chunked delta-rule kernels in f32 (kernels/cuda/delta_rule_chunked.cu) and in bf16
// (kernels/cuda/delta_rule_chunked_bf16.cu) share: how they number a slice's sub-chunks, and
// the decays D and their gradient, which both compute in f32 on the CUDA cores (the gradient
// from the same G = dL/dD).
// (The f32 backward's workspace layout is here too; the bf16 file keeps its own, with each
// sub-chunk's factors.)
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/delta_rule.h"

namespace tarn::kernels::TARN_CUDA_NS::delta_chunked {

// `per_chunk` slots for each checkpoint's chunk (the last chunk may leave some empty), `slots`
// in all a slice, for sub-chunks of c tokens.
struct SubChunks {
  int64_t chunks, per_chunk, slots;
};
__host__ __device__ inline SubChunks sub_chunks(const cpu::DeltaRuleDims& dims, const cpu::DeltaRuleConfig& cfg,
                                                int64_t c) {
  SubChunks s{};
  s.chunks = (dims.n + cfg.chunk - 1) / cfg.chunk;
  s.per_chunk = (cfg.chunk + c - 1) / c;
  s.slots = s.chunks * s.per_chunk;
  return s;
}

// The f32 backward's workspace, per slice: the state before each sub-chunk (slots states; the first
// sub-chunk of a chunk starts from its checkpoint instead, so its slot is unused), then the
// gradient of the state after each (slots states).
struct Workspace {
  float* states;
  float* grads;
};
__device__ inline Workspace workspace_of(float* workspace, int64_t b, int64_t slots, int64_t state) {
  float* base = workspace + b * 2 * slots * state;
  return {base, base + slots * state};
}

// D (Smem::D, columns -1 .. L - 1), a row a thread: running products of alpha (Smem::alpha,
// from index 0 for column -1) from the diagonal leftwards, 0 above the diagonal.
template <typename Smem>
__device__ __forceinline__ void decays(const Smem& m, int64_t L) {
  for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
    float p = 1.0f;
    m.D(t, t) = 1.0f;
    for (int64_t s = t - 1; s >= -1; --s) {
      p *= m.alpha[s + 1];
      m.D(t, s) = p;
    }
    for (int64_t s = t + 1; s < L; ++s) m.D(t, s) = 0.0f;
  }
}

// d alpha for a sub-chunk of L tokens at scan position u0, from G = dL/dD (Smem::G, D_ts in
// Smem::D, columns -1 .. L - 1) once its rows are complete but for the last row's e and b_{L-1}
// terms: de (e_s's gradients, Smem::de) and d_last (b_{L-1}'s, the same in every thread). Since
// D_ts = D_tr alpha_r D_{r-1,s} for s < r <= t,
//   d alpha_r = sum_{t >= r} D_tr sum_{-1 <= s < r} G_ts D_{r-1,s}     (D_{-1,-1} = 1)
// which divides by no alpha. Starts with the last row's update and a barrier; writes
// d_alpha[in.row(u0 + r)], a row a thread.
template <typename Smem, typename Slice>
__device__ void alpha_gradients(const Smem& m, const Slice& in, int64_t u0, int64_t L, float d_last, float* d_alpha) {
  for (int64_t s = threadIdx.x; s < L - 1; s += blockDim.x) m.G(L - 1, s) += m.de[s];
  if (threadIdx.x == 0) m.G(L - 1, -1) += d_last;
  __syncthreads();
  for (int64_t r = threadIdx.x; r < L; r += blockDim.x) {
    float acc = 0.0f;
    for (int64_t t = r; t < L; ++t) {
      float inner = r == 0 ? m.G(t, -1) : 0.0f;  // D_{-1,-1} = 1
      if (r > 0)
        for (int64_t s = -1; s < r; ++s) inner += m.G(t, s) * m.D(r - 1, s);
      acc += m.D(t, r) * inner;
    }
    d_alpha[in.row(u0 + r)] = acc;
  }
}

}  // namespace tarn::kernels::TARN_CUDA_NS::delta_chunked
