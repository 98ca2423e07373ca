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
