#pragma once
// The CUDA kernels' entry points: the same names and raw-pointer signatures as the CPU kernels
// (kernels/<family>.h, namespace tarn::kernels::cpu), in two namespaces built from one source:
//   tarn::kernels::cuda      nvcc's build (tarn_kernels_cuda; only when TARN_WITH_CUDA)
//   tarn::kernels::cuda_emu  g++'s build against the CUDA emulator (tarn_kernels_emu, tests)
// Every buffer pointer is device memory (host memory under the emulator); shape and stride
// arrays are host memory. Work goes to the default stream; the functions that return a value
// copy it back and so synchronise. Enum and struct types are the CPU headers'.
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/layout.h"
#include "kernels/linear_attention.h"
#include "kernels/optim.h"

namespace tarn::kernels::cuda {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda_emu

// linear_attention.cu (kernels/linear_attention.h): the chunked causal scan with its forward
// (dA) and reverse (dB, dV) backward scans, bidirectional and cross attention, and the
// recurrent step. a and b are features already (cfg.feature_map must be identity); the
// workspace (device memory, *_workspace_floats of it) is (B, H, Nq, e + 1) floats.
#define TARN_CUDA_LINEAR_ATTENTION_API                                                                              \
  using cpu::LinearAttentionConfig;                                                                                 \
  using cpu::LinearAttentionDims;                                                                                   \
  size_t linear_attention_forward_workspace_floats(const LinearAttentionDims& dims,                                 \
                                                   const LinearAttentionConfig& cfg);                               \
  void linear_attention_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,  \
                                const float* b, const float* v, float* out, float* den, float* workspace,          \
                                size_t workspace_floats);                                                           \
  size_t linear_attention_backward_workspace_floats(const LinearAttentionDims& dims,                                \
                                                    const LinearAttentionConfig& cfg);                              \
  void linear_attention_backward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a, \
                                 const float* b, const float* v, const float* out, const float* den,                \
                                 const float* dout, float* da, float* db, float* dv, float* workspace,              \
                                 size_t workspace_floats);                                                          \
  void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,     \
                             const float* b, const float* v, float* state, float* out);

namespace tarn::kernels::cuda {
TARN_CUDA_LINEAR_ATTENTION_API
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
TARN_CUDA_LINEAR_ATTENTION_API
}  // namespace tarn::kernels::cuda_emu

#undef TARN_CUDA_LINEAR_ATTENTION_API
