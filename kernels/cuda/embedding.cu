// Embedding lookup and its deterministic backward (kernels/embedding.h).
//
// Backward without atomics: the keys (id << 32 | position) are unique, so sorting them (a
// bitonic sort: local stages in shared memory, long strides through global memory) gives one
// well-defined order, grouping each id's positions in increasing position. Then the first
// position of each group sums its rows in that order, exactly as the CPU kernel does (first
// row copied, the rest added), so the result is the CPU's bit for bit. Rows no id names are 0.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

constexpr int kSortTile = 1024;  // keys sorted per block in shared memory (one per thread)
constexpr uint64_t kPadKey = ~uint64_t{0};

// out (n, dim) = weight rows ids[i]; x over dim, y strides over ids.
__global__ void embedding_forward_kernel(const float* weight, const int32_t* ids, float* out, int64_t n,
                                         int64_t dim) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) out[i * dim + c] = weight[static_cast<int64_t>(ids[i]) * dim + c];
}

// keys[k] = (ids[k] << 32) | k for k < n, the largest key above (padding to a power of two).
__global__ void make_keys_kernel(const int32_t* ids, uint64_t* keys, int64_t n, int64_t padded) {
  for (int64_t k = global_index(); k < padded; k += global_stride())
    keys[k] = k < n ? (static_cast<uint64_t>(static_cast<uint32_t>(ids[k])) << 32) | static_cast<uint64_t>(k) : kPadKey;
}

// Orders s[t] and s[t ^ j] for a bitonic merge of sequences of length k: ascending where the
// global index i has bit k clear. Slot: int for a tile in shared memory, int64_t for all keys.
template <class Slot>
__device__ __forceinline__ void compare_exchange(uint64_t* s, Slot t, Slot j, int64_t i, int64_t k) {
  const Slot p = t ^ j;
  if (p <= t) return;
  const uint64_t a = s[t], b = s[p];
  const bool ascending = (i & k) == 0;
  if ((a > b) == ascending) {
    s[t] = b;
    s[p] = a;
  }
}

// In shared memory, per tile of kSortTile keys: with k_first == 2 the whole sort for k up to
// kSortTile; otherwise the steps j < kSortTile of the merge for this k. Launched with kSortTile
// threads: the bound holds ptxas to the registers that many threads can have.
__global__ void __launch_bounds__(kSortTile) bitonic_tile_kernel(uint64_t* keys, int64_t k_first, int64_t k_last) {
  __shared__ uint64_t s[kSortTile];
  const int t = threadIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSortTile + t;
  s[t] = keys[i];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k *= 2) {
    for (int64_t j = (k < kSortTile ? k : kSortTile) / 2; j > 0; j /= 2) {
      compare_exchange(s, t, static_cast<int>(j), i, k);
      __syncthreads();
    }
  }
  keys[i] = s[t];
}

// One step with stride j >= kSortTile, through global memory.
__global__ void bitonic_global_kernel(uint64_t* keys, int64_t padded, int64_t j, int64_t k) {
  for (int64_t i = global_index(); i < padded; i += global_stride()) compare_exchange(keys, i, j, i, k);
}

// dweight rows: the first sorted slot of each id's run sums the run's dy rows in order.
// x over dim, y strides over sorted slots.
__global__ void embedding_accumulate_kernel(const uint64_t* keys, const float* dy, float* dweight, int64_t n,
                                            int64_t dim) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  for (int64_t s = blockIdx.y; s < n; s += gridDim.y) {
    const uint64_t id = keys[s] >> 32;
    if (s > 0 && (keys[s - 1] >> 32) == id) continue;  // not the first of its run
    float acc = dy[static_cast<int64_t>(keys[s] & 0xffffffffu) * dim + c];
    for (int64_t e = s + 1; e < n && (keys[e] >> 32) == id; ++e)
      acc += dy[static_cast<int64_t>(keys[e] & 0xffffffffu) * dim + c];
    dweight[static_cast<int64_t>(id) * dim + c] = acc;
  }
}

}  // namespace

void embedding_forward(const float* weight, const int32_t* ids, float* out, int64_t n, int64_t vocab, int64_t dim) {
  if (n <= 0 || dim <= 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(n, device::kMaxGridY)));
  tarn::launch(embedding_forward_kernel, grid, kBlock, 0, nullptr, weight, ids, out, n, dim);
}

void embedding_backward(const float* dy, const int32_t* ids, float* dweight, int64_t n, int64_t vocab, int64_t dim) {
  if (vocab <= 0 || dim <= 0) return;
  TARN_CUDA_CALL(cudaMemsetAsync(dweight, 0, static_cast<size_t>(vocab * dim) * sizeof(float), nullptr));
  if (n <= 0) return;
  TARN_ASSERT(n <= 0xffffffffLL, "embedding_backward: at most 2^32 positions, got ", n);
  int64_t padded = kSortTile;  // a power of two, at least one tile
  while (padded < n) padded *= 2;
  Scratch<uint64_t> keys(padded);
  tarn::launch(make_keys_kernel, grid_for(padded), kBlock, 0, nullptr, ids, keys.get(), n, padded);
  const unsigned tiles = static_cast<unsigned>(padded / kSortTile);
  tarn::launch(bitonic_tile_kernel, tiles, kSortTile, 0, nullptr, keys.get(), int64_t{2}, int64_t{kSortTile});
  for (int64_t k = 2 * kSortTile; k <= padded; k *= 2) {
    for (int64_t j = k / 2; j >= kSortTile; j /= 2)
      tarn::launch(bitonic_global_kernel, grid_for(padded), kBlock, 0, nullptr, keys.get(), padded, j, k);
    tarn::launch(bitonic_tile_kernel, tiles, kSortTile, 0, nullptr, keys.get(), k, k);
  }
  const dim3 grid(static_cast<unsigned>((dim + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(n, device::kMaxGridY)));
  tarn::launch(embedding_accumulate_kernel, grid, kBlock, 0, nullptr, static_cast<const uint64_t*>(keys.get()), dy,
               dweight, n, dim);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
