#pragma once
// Warp-level tensor-core tile products, bf16 x bf16 -> f32, one 16x16x16 shape, for kernels that
// run both under nvcc and on the CUDA emulator (kernels/emu/README.md):
//   nvcc       nvcuda::wmma fragments and mma_sync (sm_80 and later)
//   emulator   a plain C++ fallback with the same warp-collective contract, so that the emulator
//              runs the very kernel code the GPU runs and tests its logic
//
//   mma::bf16                          the element type of A and B (__nv_bfloat16 / tarn::bf16)
//   mma::to_bf16(f), mma::to_float(h)  conversions (round to nearest even)
//   mma::FragmentA<RowMajor|ColMajor>  a 16x16 A tile,  mma::FragmentB<...> a 16x16 B tile
//   mma::Accumulator                   a 16x16 f32 tile
//   mma::load(frag, ptr, ld)           A/B from bf16 shared memory, or an accumulator from f32
//                                      (row-major); ld in elements
//   mma::zero(acc)                     acc = 0
//   mma::multiply_add(acc, a, b)       acc += a b
//   mma::store(ptr, acc, ld)           acc to f32 memory, row-major
//
// The contract, as for wmma: every call is warp-collective (all 32 lanes of a warp, converged,
// same arguments); pointers are 32-byte aligned and ld a multiple of 16 bytes; a lane owns an
// unspecified share of each tile, so kernels never index fragment elements; and store() writes
// only this lane's share, so other lanes' values are visible after a __syncwarp() (or a
// __syncthreads()). The emulator enforces what it can: misaligned pointers or bad ld throw, a
// lane's share is a scrambled set of elements (emulated::Share), so a kernel relying on any
// layout reads wrong values, and a read of the stored tile before __syncwarp() sees other
// lanes' elements unwritten (lanes run ahead until the next collective).
//   mma::align_shared(p), kSharedSlack  dynamic shared memory is only 16-byte aligned: round its
//                                      start up and ask for kSharedSlack more bytes
#include "kernels/cuda/common.cuh"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <mma.h>
#else
#include "kernels/check.h"
#include "kernels/emu/bf16.h"
#endif

namespace tarn::kernels::TARN_CUDA_NS {
namespace mma {

constexpr int kTile = 16;  // rows, columns and depth of every fragment

// Fragment pointers must be 32-byte aligned, and dynamic shared memory is only promised 16
// (TARN_DYNAMIC_SHARED; the emulator gives just that): kernels round its start up with
// align_shared and ask for kSharedSlack more bytes at launch.
constexpr size_t kSharedAlign = 128;
constexpr size_t kSharedSlack = kSharedAlign - 16;
__host__ __device__ __forceinline__ unsigned char* align_shared(void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<unsigned char*>((u + kSharedAlign - 1) / kSharedAlign * kSharedAlign);
}

#if defined(__CUDACC__)

using bf16 = __nv_bfloat16;
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }

struct RowMajor {
  using layout = nvcuda::wmma::row_major;
};
struct ColMajor {
  using layout = nvcuda::wmma::col_major;
};
template <typename L>
using FragmentA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, kTile, kTile, kTile, bf16, typename L::layout>;
template <typename L>
using FragmentB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, kTile, kTile, kTile, bf16, typename L::layout>;
using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, kTile, kTile, kTile, float>;

template <typename Fragment>
__device__ __forceinline__ void load(Fragment& f, const bf16* ptr, int ld) {
  nvcuda::wmma::load_matrix_sync(f, ptr, ld);
}
__device__ __forceinline__ void load(Accumulator& c, const float* ptr, int ld) {
  nvcuda::wmma::load_matrix_sync(c, ptr, ld, nvcuda::wmma::mem_row_major);
}
__device__ __forceinline__ void zero(Accumulator& c) { nvcuda::wmma::fill_fragment(c, 0.0f); }
// (Deduced from the fragment types: the aliases above hide their layout parameter.)
template <typename FragA, typename FragB>
__device__ __forceinline__ void multiply_add(Accumulator& c, const FragA& a, const FragB& b) {
  nvcuda::wmma::mma_sync(c, a, b, c);
}
__device__ __forceinline__ void store(float* ptr, const Accumulator& c, int ld) {
  nvcuda::wmma::store_matrix_sync(ptr, c, ld, nvcuda::wmma::mem_row_major);
}

#else  // the emulator's fallback

using bf16 = ::tarn::bf16;
inline bf16 to_bf16(float x) { return ::tarn::bf16_from_float(x); }
inline float to_float(bf16 x) { return ::tarn::bf16_to_float(x); }

struct RowMajor {
  static constexpr bool row_major = true;
};
struct ColMajor {
  static constexpr bool row_major = false;
};

namespace emulated {

constexpr int kShare = kTile * kTile / 32;  // elements of a tile per lane
constexpr int kMaxWarps = 32;               // warps of the largest block (1024 threads)

inline int lane() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return static_cast<int>(linear % 32);
}
inline int warp() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return static_cast<int>(linear / 32);
}
// This lane's share of a tile: the elements (lane + 32 t) * 37 mod 256 (t < kShare) in
// row-major order. 37 is odd, so that is a permutation of the tile; it is scrambled on purpose:
// a kernel that reads a stored tile in any simple per-lane pattern (lane + 32 t, 8 lane + t,
// a row per lane pair...) reads other lanes' elements, and without a __syncwarp after store()
// it reads them before they are written, as it may on hardware.
struct Share {
  float x[kShare];
};
inline int element_of(int t) {
  return (lane() + 32 * t) * 37 % (kTile * kTile);
}

inline int row_of(int t) { return element_of(t) / kTile; }
inline int col_of(int t) { return element_of(t) % kTile; }

// The hardware's requirements (wmma: 256-bit aligned pointer, ld a multiple of 16 bytes), which
// the GPU does not check.
inline void check_access(const void* ptr, int ld, size_t element_bytes) {
  TARN_ASSERT(ptr && reinterpret_cast<uintptr_t>(ptr) % 32 == 0, "mma: fragment pointer ", ptr,
              " is not 32-byte aligned");
  TARN_ASSERT(ld >= kTile && (ld * element_bytes) % 16 == 0, "mma: leading dimension ", ld,
              " is below 16 or not a multiple of 16 bytes");
}

// The warp's tiles during one multiply_add: every lane deposits its share of A and B, and
// reads the whole of both after a __syncwarp. Like __shared__, one copy per running block.
struct Exchange {
  float a[kTile * kTile];
  float b[kTile * kTile];
};
inline Exchange& exchange() {
  static thread_local Exchange per_warp[kMaxWarps];
  return per_warp[warp()];
}

}  // namespace emulated

template <typename L>
struct FragmentA : emulated::Share {};
template <typename L>
struct FragmentB : emulated::Share {};
struct Accumulator : emulated::Share {};

template <typename L>
inline void load_share(emulated::Share& f, const bf16* ptr, int ld) {
  emulated::check_access(ptr, ld, sizeof(bf16));
  for (int t = 0; t < emulated::kShare; ++t) {
    const int r = emulated::row_of(t), c = emulated::col_of(t);
    f.x[t] = to_float(L::row_major ? ptr[r * ld + c] : ptr[c * ld + r]);
  }
}
template <typename L>
inline void load(FragmentA<L>& f, const bf16* ptr, int ld) {
  load_share<L>(f, ptr, ld);
}
template <typename L>
inline void load(FragmentB<L>& f, const bf16* ptr, int ld) {
  load_share<L>(f, ptr, ld);
}
inline void load(Accumulator& c, const float* ptr, int ld) {
  emulated::check_access(ptr, ld, sizeof(float));
  for (int t = 0; t < emulated::kShare; ++t) c.x[t] = ptr[emulated::row_of(t) * ld + emulated::col_of(t)];
}
inline void zero(Accumulator& c) {
  for (float& x : c.x) x = 0.0f;
}
template <typename LA, typename LB>
inline void multiply_add(Accumulator& c, const FragmentA<LA>& a, const FragmentB<LB>& b) {
  emulated::Exchange& ex = emulated::exchange();
  for (int t = 0; t < emulated::kShare; ++t) {
    const int idx = emulated::element_of(t);
    ex.a[idx] = a.x[t];
    ex.b[idx] = b.x[t];
  }
  __syncwarp();  // every lane's share is in
  for (int t = 0; t < emulated::kShare; ++t) {
    const int r = emulated::row_of(t), col = emulated::col_of(t);
    float acc = c.x[t];
    for (int k = 0; k < kTile; ++k) acc += ex.a[r * kTile + k] * ex.b[k * kTile + col];
    c.x[t] = acc;
  }
  __syncwarp();  // every lane has read both tiles before the next call overwrites them
}
inline void store(float* ptr, const Accumulator& c, int ld) {
  emulated::check_access(ptr, ld, sizeof(float));
  for (int t = 0; t < emulated::kShare; ++t) ptr[emulated::row_of(t) * ld + emulated::col_of(t)] = c.x[t];
}

#endif

}  // namespace mma
}  // namespace tarn::kernels::TARN_CUDA_NS
