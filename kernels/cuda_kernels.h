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
#include "kernels/optim.h"

namespace tarn::kernels::cuda {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda

namespace tarn::kernels::cuda_emu {
#include "kernels/cuda/api.inc"
}  // namespace tarn::kernels::cuda_emu
