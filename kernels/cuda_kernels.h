#pragma once
// The CUDA kernels' entry points: the same names and raw-pointer signatures as the CPU kernels
// (kernels/<family>.h, namespace tarn::kernels::cpu), in two namespaces built from one source:
//   tarn::kernels::cuda      nvcc's build (tarn_kernels_cuda; only when TARN_WITH_CUDA)
//   tarn::kernels::cuda_emu  g++'s build against the CUDA emulator (tarn_kernels_emu, tests)
// Every buffer pointer is device memory (host memory under the emulator); shape and stride
// arrays are host memory. Work goes to the default stream; the functions that return a value
// copy it back and so synchronise. Enum and struct types are the CPU headers'.
#include <cstdint>

#include "kernels/cast.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_api.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layout.h"
#include "kernels/linear_attention.h"
#include "kernels/optim.h"
#include "kernels/rms_norm.h"

namespace tarn::kernels::cuda {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda_emu

// linear_attention.cu (kernels/linear_attention.h): the chunked causal scan with its forward
// (dA) and reverse (dB, dV) backward scans, bidirectional and cross attention; the recurrent
// step in linear_attention_step.cu. cfg.feature_map elu1, relu, exp or identity is fused into the kernels (a, b
// are the raw q, k; backward returns dq, dk), as on the CPU; favor is not row-local: apply
// favor_forward below first and pass identity. The workspace (device memory,
// *_workspace_floats of it) is (B, H, Nq, e + 1) floats, plus B * H * segments * d * (e + 1)
// when the sequence is split across blocks (small B * H: fewer blocks than SMs; at most one
// segment per 4 chunks of 32 rows, so still linear in N). The split depends on the device's
// SM count: query the workspace for the device that runs the call.
//
// linear_attention_set_sequence_split(n): n >= 1 forces n segments (clamped to the chunks of
// 32 rows; 1 = never split), 0 restores the automatic choice. Process-wide, for the f32 kernels
// and the bf16 ones of kernels/cuda_linear_attention_bf16.h alike; for tests and benchmarks.
// Query the workspace after setting it.
//
// linear_attention_favor.cu (kernels/feature_maps.h): the FAVOR+ feature map, x (slices, rows,
// d) -> y (slices, rows, m), the projection through gemm_batched (cuBLAS; the emulated build
// calls the CPU's) and the stabilised exp fused in one row-wise pass; backward likewise, with
// favor_backward_workspace_floats (device) floats of workspace.
namespace tarn::kernels {
// Rows per chunk of the f32 causal scan: fixed, cfg.chunk is not read (the backend table says
// so to the layers above, kernels/backend.h).
constexpr int64_t kCudaLinearAttentionChunk = 32;
}  // namespace tarn::kernels

#define TARN_CUDA_LINEAR_ATTENTION_API                                                                              \
  using cpu::FavorDims;                                                                                             \
  using cpu::FavorStabilizer;                                                                                       \
  using cpu::LinearAttentionConfig;                                                                                 \
  using cpu::LinearAttentionDims;                                                                                   \
  TARN_CUDA_ATTENTION_PASSES(linear_attention, LinearAttentionDims, LinearAttentionConfig, float)              \
  void linear_attention_step(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const float* a,     \
                             const float* b, const float* v, float* state, float* out);                            \
  void linear_attention_set_sequence_split(int segments);                                                           \
  void favor_forward(const FavorDims& dims, FavorStabilizer stab, const float* x, const float* w, float* y);        \
  size_t favor_backward_workspace_floats(const FavorDims& dims);                                                    \
  void favor_backward(const FavorDims& dims, FavorStabilizer stab, const float* x, const float* w, const float* y,  \
                      const float* dy, float* dx, float* workspace, size_t workspace_floats);

TARN_DECLARE_CUDA_API(TARN_CUDA_LINEAR_ATTENTION_API)

#undef TARN_CUDA_LINEAR_ATTENTION_API
