#pragma once
// Asynchronous global -> shared copies (PTX cp.async, sm_80 and later), for kernels that load
// the next tile while they compute on the current one. Under nvcc the PTX instructions; on the
// emulator (kernels/emu/emu.h, detail::async_copy) the same rules, enforced:
//
//   async::copy16(dst, src)                cp.async.cg.shared.global [dst], [src], 16
//   async::copy16_or_zero(dst, src, ok)    the same with src-size 16 or 0: when !ok, dst gets 16
//                                          zero bytes and nothing is read (src must still be a
//                                          valid address, e.g. the tensor's start)
//   async::commit()                        cp.async.commit_group: closes this thread's group
//   async::wait<N>()                       cp.async.wait_group N: every group of this thread but
//                                          the N most recent is complete, and visible to it
//   async::wait_all()                      commit and wait for everything
//
// Both addresses 16-byte aligned. A copy is visible to the issuing thread after its wait, and to
// the block's other threads after that wait and a __syncthreads(). The emulator fills the
// destination with NaN bytes at issue and copies at the wait: a read before the wait, or a
// copy issued into a buffer other warps still read, shows as NaN. A thread must not exit with
// copies pending (the emulator reports it).
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace tarn::kernels::TARN_CUDA_NS {
namespace async {

#if defined(__CUDACC__)

__device__ __forceinline__ void copy16_or_zero(void* dst, const void* src, bool ok) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void copy16(void* dst, const void* src) { copy16_or_zero(dst, src, true); }
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

#else  // the emulator

inline void copy16_or_zero(void* dst, const void* src, bool ok, const char* file = __builtin_FILE(),
                           int line = __builtin_LINE()) {
  ::tarn::emu::detail::async_copy(dst, src, 16, ok ? 16 : 0, file, line);
}
inline void copy16(void* dst, const void* src, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::tarn::emu::detail::async_copy(dst, src, 16, 16, file, line);
}
inline void commit(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::tarn::emu::detail::async_commit(file, line);
}
template <int N>
inline void wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::tarn::emu::detail::async_wait(N, file, line);
}
inline void wait_all(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::tarn::emu::detail::async_commit(file, line);
  ::tarn::emu::detail::async_wait(0, file, line);
}

#endif

}  // namespace async
}  // namespace tarn::kernels::TARN_CUDA_NS
