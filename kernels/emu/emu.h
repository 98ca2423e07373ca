#pragma once
// CUDA semantics in plain C++, for tests (docs/design.md section 4). A `.cu` file compiled by g++
// against this header (through kernels/cuda/launch.cuh) runs on the CPU:
//   - every CUDA thread is a fiber (kernels/emu/fiber.h); a block runs to completion on one OS
//     worker thread, blocks spread over a small worker pool;
//   - threadIdx / blockIdx / blockDim / gridDim are per-OS-thread values the scheduler sets on
//     each switch; `__shared__` is `static thread_local` (one copy per worker = per running
//     block); dynamic shared memory is a per-block buffer filled with NaN bytes;
//   - __syncthreads is a real barrier over the block's threads; warp shuffles, votes and
//     __syncwarp resolve when every lane named in the mask has reached one (shfl.sync rules);
//     divergent barriers and deadlocks are errors that name file:line;
//   - atomics are real atomics (blocks of one launch run in parallel);
//   - the runtime API (cudaMalloc, cudaMemcpy, streams, events) is host memory and no-ops.
// Thread order inside a block is forward, reverse or random: TARN_EMU_ORDER or
// tarn::emu::set_thread_order(). What this cannot show: timing, the memory model, the exact
// bits of fast-math intrinsics (__expf is expf here).
//
// Every name lives in namespace tarn::emu and is brought to the global namespace with a
// using-declaration, so nothing here collides at link time with the real CUDA runtime when a
// program holds both backends.
#if defined(__CUDACC__)
#error "kernels/emu/emu.h is the CPU emulation of CUDA: nvcc must not see it"
#endif

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define TARN_EMULATED 1

// Qualifiers: device and host code are the same C++ here.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// One copy per worker OS thread, i.e. per running block (a block never changes worker).
#define __shared__ static thread_local

namespace tarn::emu {

// ---------------------------------------------------------------------------------------------
// Built-in vector types and the index variables.

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// Set by the scheduler before it resumes a fiber. `__thread` (constant-initialised, no TLS
// wrapper call) with the initial-exec model: reading threadIdx.x costs one %fs-relative load.
#define TARN_EMU_TLS __thread __attribute__((tls_model("initial-exec")))
extern TARN_EMU_TLS uint3 threadIdx;
extern TARN_EMU_TLS uint3 blockIdx;
extern TARN_EMU_TLS dim3 blockDim;
extern TARN_EMU_TLS dim3 gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// Scheduler entry points (kernels/emu/scheduler.cpp). Fibers call these; each records where it
// was called from (file, line) and yields until the collective resolves.

enum class Collective : int {
  shfl_idx, shfl_up, shfl_down, shfl_xor,   // shuffles
  ballot, any, all, syncwarp,               // votes and the warp barrier
  barrier, barrier_count, barrier_and, barrier_or,  // __syncthreads and its reductions
};

namespace detail {
// One warp collective: `value` holds the lane's operand (value_size bytes), `arg` the source
// lane / delta / lane mask. Returns the result bits.
uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int value_size, int arg, int width,
                         const char* file, int line);
int block_barrier(Collective op, int predicate, const char* file, int line);
void* dynamic_shared();
unsigned active_mask();
// cp.async (kernels/cuda/async_copy.cuh): the calling thread's copies of `bytes` (4, 8 or 16)
// from global to shared memory, of which the first src_bytes are read and the rest zeroed.
// The destination reads as NaN bytes from the copy until a wait completes it (the data is not
// visible before its wait_group); async_commit closes the thread's open group; async_wait(n)
// completes every committed group but the n most recent. A thread that exits with copies
// pending is an error (nothing could wait for them).
void async_copy(void* dst, const void* src, int bytes, int src_bytes, const char* file, int line);
void async_commit(const char* file, int line);
void async_wait(int pending_groups, const char* file, int line);

template <typename T>
T shuffle(Collective op, unsigned mask, T var, int arg, int width, const char* file, int line) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(op, mask, bits, static_cast<int>(sizeof(T)), arg, width, file, line);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Barriers, shuffles, votes. The trailing (file, line) defaults capture the call site.

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::block_barrier(Collective::barrier, 1, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return detail::block_barrier(Collective::barrier_count, pred, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return detail::block_barrier(Collective::barrier_and, pred, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return detail::block_barrier(Collective::barrier_or, pred, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::warp_collective(Collective::syncwarp, mask, 0, 0, 0, warpSize, file, line);
}

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  return detail::shuffle(Collective::shfl_idx, mask, var, src_lane, width, file, line);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  return detail::shuffle(Collective::shfl_up, mask, var, static_cast<int>(delta), width, file, line);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  return detail::shuffle(Collective::shfl_down, mask, var, static_cast<int>(delta), width, file, line);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  return detail::shuffle(Collective::shfl_xor, mask, var, lane_mask, width, file, line);
}

inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(
      detail::warp_collective(Collective::ballot, mask, pred != 0, 4, 0, warpSize, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(detail::warp_collective(Collective::any, mask, pred != 0, 4, 0, warpSize, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(detail::warp_collective(Collective::all, mask, pred != 0, 4, 0, warpSize, file, line));
}
// Lanes of the calling warp that have not exited (the emulator has no finer notion of "active").
inline unsigned __activemask() { return detail::active_mask(); }

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// ---------------------------------------------------------------------------------------------
// Atomics: real atomics on host memory (relaxed, as CUDA's are).

namespace detail {
// *a = v while replaces(*a, v) holds, retried until no other thread changed *a in between;
// returns the value *a held before (atomicMax and atomicMin).
template <typename T, typename Replaces>
inline T atomic_store_if(T* a, T v, Replaces replaces) {
  T old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (replaces(old, v) && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
}  // namespace detail

#define TARN_EMU_INT_ATOMICS(T)                                                                  \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }          \
  inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }          \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }          \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }            \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }          \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }        \
  inline T atomicCAS(T* a, T expected, T desired) {                                             \
    __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return expected;                                                                            \
  }                                                                                             \
  inline T atomicMax(T* a, T v) { return detail::atomic_store_if(a, v, [](T held, T offered) { return held < offered; }); } \
  inline T atomicMin(T* a, T v) { return detail::atomic_store_if(a, v, [](T held, T offered) { return offered < held; }); }
TARN_EMU_INT_ATOMICS(int)
TARN_EMU_INT_ATOMICS(unsigned)
TARN_EMU_INT_ATOMICS(long long)
TARN_EMU_INT_ATOMICS(unsigned long long)
#undef TARN_EMU_INT_ATOMICS

// Floating-point add through a compare-and-swap on the bits, as the hardware's result would be
// for one ordering of the additions.
template <typename F, typename Bits>
F atomic_float_add(F* a, F v) {
  static_assert(sizeof(F) == sizeof(Bits), "bits");
  Bits* p = reinterpret_cast<Bits*>(a);
  Bits old_bits = __atomic_load_n(p, __ATOMIC_RELAXED);
  for (;;) {
    F old;
    std::memcpy(&old, &old_bits, sizeof(F));
    const F sum = old + v;
    Bits new_bits;
    std::memcpy(&new_bits, &sum, sizeof(F));
    if (__atomic_compare_exchange_n(p, &old_bits, new_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return old;
  }
}
inline float atomicAdd(float* a, float v) { return atomic_float_add<float, uint32_t>(a, v); }
inline double atomicAdd(double* a, double v) { return atomic_float_add<double, uint64_t>(a, v); }
inline float atomicExch(float* a, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = __atomic_exchange_n(reinterpret_cast<uint32_t*>(a), bits, __ATOMIC_RELAXED);
  float old;
  std::memcpy(&old, &bits, 4);
  return old;
}

// ---------------------------------------------------------------------------------------------
// Device intrinsics that <math.h> lacks. Fast-math ones are the accurate functions here.
// glibc itself declares __expf and kin (its internal aliases), so those are macros.
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanhf(x) tanhf(x)
#define __powf(x, y) powf(x, y)

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / ::sqrt(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned x) { return static_cast<float>(x); }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline int __float_as_int(float x) { int u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
inline float __int_as_float(int u) { float x; std::memcpy(&x, &u, 4); return x; }
inline long long __double_as_longlong(double x) { long long u; std::memcpy(&u, &x, 8); return u; }
inline double __longlong_as_double(long long u) { double x; std::memcpy(&x, &u, 8); return x; }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
template <typename T>
inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------------------------------------
// Runtime API stand-ins: device memory is host memory, streams and events are synchronous.

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNotReady = 600,  // a query of work still in flight (set_completion_polls)
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaDeviceAttr : int {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
struct EmuStream;
struct EmuEvent;
using cudaStream_t = EmuStream*;
using cudaEvent_t = EmuEvent*;
constexpr unsigned cudaStreamNonBlocking = 1;
// The legacy default stream's handle (nullptr names it too).
extern EmuStream* const cudaStreamLegacy;

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t s);
template <typename T>
cudaError_t cudaMallocAsync(T** ptr, size_t bytes, cudaStream_t s) {
  return cudaMallocAsync(reinterpret_cast<void**>(ptr), bytes, s);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t s);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
// cudaErrorNotReady (also left as the thread's last error, as CUDA does) while the stream's
// last recorded event is in flight (set_completion_polls), else cudaSuccess.
cudaError_t cudaStreamQuery(cudaStream_t s);
// Everything is synchronous here, so the event has always happened.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
constexpr unsigned cudaEventDisableTiming = 2;
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
// As cudaStreamQuery, for one event.
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaDeviceSynchronize();
// Clears a sticky error (fault_device) and the thread's last error, as a new context would.
cudaError_t cudaDeviceReset();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
// The device's free and total bytes: set_device_memory's capacity less the live cudaMalloc blocks.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
// The thread's last error, cleared by the call, as CUDA's; a sticky error (fault_device) is
// returned by every call and never cleared until cudaDeviceReset.
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
// Raises a kernel's dynamic shared memory limit above the default 48 KiB, as on hardware.
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*func)(P...), cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

// ---------------------------------------------------------------------------------------------
// Launching and settings.

enum class ThreadOrder { forward, reverse, random };

// Thread order inside a block for later launches (initially TARN_EMU_ORDER, else forward).
void set_thread_order(ThreadOrder order);
ThreadOrder thread_order();
const char* thread_order_name(ThreadOrder order);
// Seed of the random order (initially TARN_EMU_SEED, else a fixed value).
void set_seed(uint64_t seed);
uint64_t seed();
// Worker OS threads that run blocks (initially TARN_EMU_WORKERS, else the CPUs the process may
// run on, at most 8).
void set_workers(int n);
int workers();
// Bytes of each fiber's stack (initially TARN_EMU_STACK_KB KiB, else 64 KiB; 512 KiB under ASan).
void set_stack_bytes(size_t bytes);

// The emulated device's memory capacity in bytes (initially 80 GiB, an H100): cudaMemGetInfo
// reports it, and a cudaMalloc past it fails with cudaErrorMemoryAllocation.
void set_device_memory(size_t bytes);
size_t device_memory();

// Work in flight. Everything runs synchronously here, so an event has happened when it is
// recorded; with n > 0, each event recorded afterwards (and its stream) answers the next n
// queries with cudaErrorNotReady, as a collective or copy still running on a real device would,
// until a synchronize completes it. Tests use it to check that callers poll correctly (a query
// leaves cudaErrorNotReady as the thread's last error, which the next launch check would read).
void set_completion_polls(int n);
int completion_polls();

// A fault inside a kernel (an illegal address, a trap): on hardware it is sticky, the context
// is unusable, and every later runtime call and launch fails with it until the process ends.
// The emulator raises one on request (its kernels' own faults throw at the launch instead), and
// cudaDeviceReset clears it. cudaSuccess when the device is healthy.
void fault_device(cudaError_t error);
cudaError_t device_fault();

// The runtime calls after which the host has waited for the device, counted since the last
// reset_host_waits() (tests count a training step's round trips with them; everything runs
// synchronously here, so these count what a real device would make the host wait for):
//   copies_to_host    cudaMemcpy device -> host (the host waits for the stream, then the copy)
//   copies_to_device  cudaMemcpy host -> device (from pageable memory the stream is
//                     synchronised before the copy starts)
//                     (cudaMemcpyAsync too, unless its source lies in cudaMallocHost memory)
//   synchronizations  cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, and
//                     cudaFree (which synchronises the device; cudaFreeAsync does not)
// and, not a wait, async_copies_to_device: cudaMemcpyAsync host -> device from pinned
// (cudaMallocHost) memory, which the host only queues.
struct HostWaits {
  uint64_t copies_to_host = 0;
  uint64_t copies_to_device = 0;
  uint64_t synchronizations = 0;
  uint64_t async_copies_to_device = 0;
};
HostWaits host_waits();
void reset_host_waits();

// Launch statistics since the last reset, for tests and benchmarks.
struct Stats {
  uint64_t launches = 0;
  uint64_t blocks = 0;
  uint64_t threads = 0;
  uint64_t switches = 0;
};
Stats stats();
void reset_stats();

// The grid argument of a launch, which also records the launch's call site.
struct LaunchGrid {
  dim3 dims;
  const char* file;
  int line;
  LaunchGrid(dim3 d, const char* f = __builtin_FILE(), int l = __builtin_LINE()) : dims(d), file(f), line(l) {}
  LaunchGrid(unsigned x, const char* f = __builtin_FILE(), int l = __builtin_LINE()) : dims(x), file(f), line(l) {}
};

// A type-erased kernel call: invoke(data) runs the kernel body for the current fiber.
struct KernelCall {
  void (*invoke)(const void* data);
  const void* data;
  const void* kernel;  // identity, for cudaFuncSetAttribute
};

// Runs every block of the grid and returns when all are done. Throws tarn::Error on an invalid
// configuration, a divergent barrier, a deadlock or an exception inside the kernel.
void run_grid(const KernelCall& call, const LaunchGrid& grid, dim3 block, size_t smem_bytes);

template <typename... P, typename... A>
void launch(void (*kernel)(P...), const LaunchGrid& grid, dim3 block, size_t smem_bytes, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  using Args = std::tuple<std::decay_t<P>...>;
  struct Call {
    void (*kernel)(P...);
    Args args;
  };
  // Each fiber gets its own copy of the arguments, as each CUDA thread has its own parameters.
  const Call call{kernel, Args(std::forward<A>(args)...)};
  KernelCall erased{[](const void* data) {
                      const Call& c = *static_cast<const Call*>(data);
                      Args copy = c.args;
                      std::apply(c.kernel, std::move(copy));
                    },
                    &call, reinterpret_cast<const void*>(kernel)};
  run_grid(erased, grid, block, smem_bytes);
}

}  // namespace tarn::emu

// The CUDA spellings, at global scope as nvcc has them.
using tarn::emu::dim3;
using tarn::emu::uint3;
using tarn::emu::float2;
using tarn::emu::float4;
using tarn::emu::int2;
using tarn::emu::int4;
using tarn::emu::uint2;
using tarn::emu::uint4;
using tarn::emu::make_float2;
using tarn::emu::make_float4;
using tarn::emu::make_int2;
using tarn::emu::make_int4;
using tarn::emu::make_uint2;
using tarn::emu::make_uint4;
using tarn::emu::threadIdx;
using tarn::emu::blockIdx;
using tarn::emu::blockDim;
using tarn::emu::gridDim;
using tarn::emu::warpSize;
using tarn::emu::__syncthreads;
using tarn::emu::__syncthreads_count;
using tarn::emu::__syncthreads_and;
using tarn::emu::__syncthreads_or;
using tarn::emu::__syncwarp;
using tarn::emu::__shfl_sync;
using tarn::emu::__shfl_up_sync;
using tarn::emu::__shfl_down_sync;
using tarn::emu::__shfl_xor_sync;
using tarn::emu::__ballot_sync;
using tarn::emu::__any_sync;
using tarn::emu::__all_sync;
using tarn::emu::__activemask;
using tarn::emu::__threadfence;
using tarn::emu::__threadfence_block;
using tarn::emu::atomicAdd;
using tarn::emu::atomicSub;
using tarn::emu::atomicAnd;
using tarn::emu::atomicOr;
using tarn::emu::atomicXor;
using tarn::emu::atomicExch;
using tarn::emu::atomicCAS;
using tarn::emu::atomicMax;
using tarn::emu::atomicMin;
using tarn::emu::rsqrtf;
using tarn::emu::rsqrt;
using tarn::emu::__fdividef;
using tarn::emu::__frcp_rn;
using tarn::emu::__fsqrt_rn;
using tarn::emu::__saturatef;
using tarn::emu::__fmaf_rn;
using tarn::emu::__fadd_rn;
using tarn::emu::__fmul_rn;
using tarn::emu::__float2int_rn;
using tarn::emu::__float2int_rz;
using tarn::emu::__int2float_rn;
using tarn::emu::__uint2float_rn;
using tarn::emu::__float_as_uint;
using tarn::emu::__float_as_int;
using tarn::emu::__uint_as_float;
using tarn::emu::__int_as_float;
using tarn::emu::__double_as_longlong;
using tarn::emu::__longlong_as_double;
using tarn::emu::__umulhi;
using tarn::emu::__umul64hi;
using tarn::emu::__popc;
using tarn::emu::__popcll;
using tarn::emu::__clz;
using tarn::emu::__clzll;
using tarn::emu::__ffs;
using tarn::emu::__ffsll;
using tarn::emu::__brev;
using tarn::emu::__ldg;
using tarn::emu::cudaError_t;
using tarn::emu::cudaError;
using tarn::emu::cudaSuccess;
using tarn::emu::cudaErrorInvalidValue;
using tarn::emu::cudaErrorMemoryAllocation;
using tarn::emu::cudaErrorInvalidConfiguration;
using tarn::emu::cudaErrorInvalidDevice;
using tarn::emu::cudaErrorInvalidDeviceFunction;
using tarn::emu::cudaErrorLaunchFailure;
using tarn::emu::cudaErrorNotReady;
using tarn::emu::cudaErrorIllegalAddress;
using tarn::emu::cudaMemcpyKind;
using tarn::emu::cudaMemcpyHostToHost;
using tarn::emu::cudaMemcpyHostToDevice;
using tarn::emu::cudaMemcpyDeviceToHost;
using tarn::emu::cudaMemcpyDeviceToDevice;
using tarn::emu::cudaMemcpyDefault;
using tarn::emu::cudaFuncAttribute;
using tarn::emu::cudaFuncAttributeMaxDynamicSharedMemorySize;
using tarn::emu::cudaFuncAttributePreferredSharedMemoryCarveout;
using tarn::emu::cudaDeviceAttr;
using tarn::emu::cudaDevAttrMaxThreadsPerBlock;
using tarn::emu::cudaDevAttrMaxSharedMemoryPerBlock;
using tarn::emu::cudaDevAttrWarpSize;
using tarn::emu::cudaDevAttrMultiProcessorCount;
using tarn::emu::cudaDevAttrMaxSharedMemoryPerBlockOptin;
using tarn::emu::cudaStream_t;
using tarn::emu::cudaEvent_t;
using tarn::emu::cudaStreamNonBlocking;
using tarn::emu::cudaStreamLegacy;
using tarn::emu::cudaEventDisableTiming;
using tarn::emu::cudaStreamQuery;
using tarn::emu::cudaEventCreateWithFlags;
using tarn::emu::cudaEventQuery;
using tarn::emu::cudaDeviceReset;
using tarn::emu::cudaMalloc;
using tarn::emu::cudaFree;
using tarn::emu::cudaMallocAsync;
using tarn::emu::cudaFreeAsync;
using tarn::emu::cudaMallocHost;
using tarn::emu::cudaFreeHost;
using tarn::emu::cudaMemcpy;
using tarn::emu::cudaMemcpyAsync;
using tarn::emu::cudaMemset;
using tarn::emu::cudaMemsetAsync;
using tarn::emu::cudaStreamCreate;
using tarn::emu::cudaStreamCreateWithFlags;
using tarn::emu::cudaStreamDestroy;
using tarn::emu::cudaStreamSynchronize;
using tarn::emu::cudaStreamWaitEvent;
using tarn::emu::cudaEventCreate;
using tarn::emu::cudaEventDestroy;
using tarn::emu::cudaEventRecord;
using tarn::emu::cudaEventSynchronize;
using tarn::emu::cudaEventElapsedTime;
using tarn::emu::cudaDeviceSynchronize;
using tarn::emu::cudaGetDeviceCount;
using tarn::emu::cudaGetDevice;
using tarn::emu::cudaSetDevice;
using tarn::emu::cudaDeviceGetAttribute;
using tarn::emu::cudaMemGetInfo;
using tarn::emu::cudaGetLastError;
using tarn::emu::cudaPeekAtLastError;
using tarn::emu::cudaGetErrorString;
using tarn::emu::cudaGetErrorName;
using tarn::emu::cudaFuncSetAttribute;
