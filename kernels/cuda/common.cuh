#pragma once
// Device helpers shared by the kernels of kernels/cuda/: launch shapes, warp and block
// reductions, scratch buffers. Builds with nvcc and against the emulator alike.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace tarn::kernels::TARN_CUDA_NS {
namespace device {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;               // threads per block of the streaming kernels
constexpr int64_t kMaxGridBlocks = 4096;  // grid-stride loops: ~30 resident blocks per SM on 132 SMs
constexpr int64_t kMaxGridY = 65535;      // hardware limit of gridDim.y (and z)

// Blocks for a grid-stride loop over n items, kBlock threads each.
inline unsigned grid_for(int64_t n, int threads = kBlock) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, kMaxGridBlocks)));
}

// Threads for one block per row of `cols` values: whole warps, at most kBlock.
inline unsigned threads_for_row(int64_t cols) {
  const int64_t warps = (cols + kWarp - 1) / kWarp;
  return static_cast<unsigned>(kWarp * std::max<int64_t>(1, std::min<int64_t>(warps, kBlock / kWarp)));
}

struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#if defined(__CUDACC__)  // (g++ would warn about the pragma in the tests that include this)
#pragma unroll
#endif
  for (int m = kWarp / 2; m > 0; m /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, m));
  return v;
}

// Reduces v over the block (blockDim.x a multiple of 32, blockDim.y == blockDim.z == 1); every
// thread gets the result, combined in warp order, so the value is the same on each call for
// the same inputs. The leading barrier lets a call follow another without a race on `partial`.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = partial[0];
  for (int w = 1; w < warps; ++w) r = op(r, partial[w]);
  return r;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, Sum()); }
__device__ __forceinline__ double block_sum(double v) { return block_reduce(v, Sum()); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, Max()); }

// atomicMax for float, which CUDA lacks: a compare-and-swap loop on the bits. Returns the old
// value; a NaN argument never wins (comparisons with NaN are false).
__device__ __forceinline__ float atomic_max(float* address, float value) {
  int* bits = reinterpret_cast<int*>(address);
  int old = *bits;
  while (__int_as_float(old) < value) {
    const int seen = atomicCAS(bits, old, __float_as_int(value));
    if (seen == old) break;
    old = seen;
  }
  return __int_as_float(old);
}

// The flat index and stride of a 1-D grid-stride loop, in 64 bits.
__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// One warp per row: row(r) for the rows r < rows that fall to the calling thread's warp (a
// grid-stride loop over warps). Every lane of a warp gets the same rows, so row may use the
// warp's collectives.
template <typename Row>
__device__ __forceinline__ void for_each_row_of_warp(int64_t rows, Row row) {
  const int64_t warp = global_index() / kWarp;
  const int64_t warps = global_stride() / kWarp;
  for (int64_t r = warp; r < rows; r += warps) row(r);
}

// Scratch memory for one call, stream-ordered on the default stream.
template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    TARN_CUDA_CALL(cudaMallocAsync(&ptr_, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T), nullptr));
  }
  ~Scratch() { cudaFreeAsync(ptr_, nullptr); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

// The dynamic shared memory a block may opt in to on the current device, in bytes.
inline int max_dynamic_smem() {
  int dev = 0, bytes = 0;
  TARN_CUDA_CALL(cudaGetDevice(&dev));
  TARN_CUDA_CALL(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return bytes;
}

// Lets `kernel` launch with `bytes` of dynamic shared memory: above the default 48 KiB a kernel
// must opt in (callers check the device's limit, max_dynamic_smem, and say what needs more).
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes) {
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (bytes > kDefaultSmem)
    TARN_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Copies one value back to the host (synchronises the default stream).
template <typename T>
T read_back(const T* device_value) {
  T v{};
  TARN_CUDA_CALL(cudaMemcpy(&v, device_value, sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace device
}  // namespace tarn::kernels::TARN_CUDA_NS
