#pragma once
// Declares a CUDA entry-point list in both namespaces of the CUDA backend:
// tarn::kernels::cuda (nvcc's build, only when TARN_WITH_CUDA) and tarn::kernels::cuda_emu (the
// same sources built against the emulator, for tests). Each header writes its declarations once
// as a macro and hands it here:
//   #define TARN_X_CUDA_API void x(float* out, int64_t n);
//   TARN_DECLARE_CUDA_API(TARN_X_CUDA_API)
//   #undef TARN_X_CUDA_API
#define TARN_DECLARE_CUDA_API(API)  \
  namespace tarn::kernels::cuda {   \
  API                               \
  }                                 \
  namespace tarn::kernels::cuda_emu { \
  API                               \
  }

// The four entry points of an attention kind's CUDA kernels, in the order kernels/backend.h's
// table lists them: NAME##_forward_workspace_floats, NAME##_forward, NAME##_backward_workspace_floats,
// NAME##_backward, on elements T (float, or ::tarn::bf16) for q, k, v, out, dout and the
// gradients; the forward's per-row f32 `aux` (softmax: lse, linear: den), which the backward
// reads back, and the workspace are f32.
#define TARN_CUDA_ATTENTION_PASSES(NAME, Dims, Config, T)                                                          \
  size_t NAME##_forward_workspace_floats(const Dims& dims, const Config& cfg);                                     \
  void NAME##_forward(const Dims& dims, const Config& cfg, const T* q, const T* k, const T* v, T* out, float* aux, \
                      float* workspace, size_t workspace_floats);                                                  \
  size_t NAME##_backward_workspace_floats(const Dims& dims, const Config& cfg);                                    \
  void NAME##_backward(const Dims& dims, const Config& cfg, const T* q, const T* k, const T* v, const T* out,      \
                       const float* aux, const T* dout, T* dq, T* dk, T* dv, float* workspace,                     \
                       size_t workspace_floats);
