#pragma once
// What every kernels/cuda/*.cu includes first. One source, two builds (docs/design.md section 4):
//   nvcc                   -> the CUDA runtime, kernels in tarn::kernels::cuda (tarn_kernels_cuda)
//   g++ -DTARN_CUDA_EMULATED -> kernels/emu/emu.h, kernels in tarn::kernels::cuda_emu
//                             (tarn_kernels_emu, tests only)
// It holds the only raw launch and the only `extern __shared__` of the kernels (tools/lint_cuda.sh
// rejects them elsewhere):
//   tarn::launch(kernel, grid, block, smem_bytes, stream, args...)   checked launch
//   TARN_DYNAMIC_SHARED(T, name)   declares `T* name` on the block's dynamic shared memory
//   TARN_CUDA_NS                   the namespace the kernels go in (cuda or cuda_emu)
#include <cstddef>
#include <utility>

#include "kernels/check.h"

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#define TARN_CUDA_NS cuda
// One extern array for every kernel of a translation unit; 16-byte aligned for float4 access.
#define TARN_DYNAMIC_SHARED(T, name)                                 \
  extern __shared__ __align__(16) unsigned char tarn_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(tarn_dynamic_smem_)

#elif defined(TARN_CUDA_EMULATED)

#include "kernels/emu/emu.h"

#define TARN_CUDA_NS cuda_emu
#define TARN_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::tarn::emu::dynamic_shared())

namespace tarn {
namespace emu::detail {
void* dynamic_shared();
}
namespace emu {
inline void* dynamic_shared() { return detail::dynamic_shared(); }
}  // namespace emu
}  // namespace tarn

#else
#error "kernels/cuda/launch.cuh: compile with nvcc, or with g++ -x c++ -DTARN_CUDA_EMULATED against the emulator"
#endif

namespace tarn {

// After a launch, the thread's last error as a tarn::Error: a bad configuration or too much
// shared memory, a sticky fault of an earlier kernel, or any error a runtime call left
// unread. The last error is per host thread and outlives the call that set it, so every caller
// of a runtime call that may fail without it being an error (cudaEventQuery's
// cudaErrorNotReady, a probe for a device) clears it with cudaGetLastError(), or this check
// blames the next launch for it. Errors inside the kernel surface at the next synchronising call.
inline void check_launch(dim3 grid, dim3 block, size_t smem_bytes) {
  const cudaError_t err = cudaGetLastError();
  TARN_CHECK(err == cudaSuccess, "CUDA kernel launch (grid (", grid.x, ",", grid.y, ",", grid.z, "), block (",
             block.x, ",", block.y, ",", block.z, "), ", smem_bytes, " bytes dynamic shared) failed: ",
             cudaGetErrorString(err));
}

#if defined(__CUDACC__)
// A plain launch, then check_launch.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<A>(args)...);
  check_launch(grid, block, smem_bytes);
}
#else
// Runs the whole grid on the emulator before returning (the stream is ignored: everything is
// synchronous), then check_launch as the hardware build does. Divergent barriers, deadlocks and
// bad configurations throw tarn::Error naming the launch site and the file:line of the barrier.
// A device with a sticky fault runs nothing, as a real one would not.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), const emu::LaunchGrid& grid, dim3 block, size_t smem_bytes, cudaStream_t,
            A&&... args) {
  if (emu::device_fault() == cudaSuccess) emu::launch(kernel, grid, block, smem_bytes, std::forward<A>(args)...);
  check_launch(grid.dims, block, smem_bytes);
}
#endif

}  // namespace tarn

// Checks a runtime call; the message names the call and where it was made.
#define TARN_CUDA_CALL(call) TARN_CHECK_STATUS(call, #call, cudaSuccess, cudaGetErrorString)
