#pragma once
// Warp-level tensor-core products with the fragments in registers: PTX mma.sync m16n8k16 (bf16
// operands, f32 accumulators) and ldmatrix (x1, x2, x4, with and without .trans), sm_80 and
// later. Unlike kernels/cuda/mma.cuh (wmma, whose fragment layout is unspecified), the layout
// here is the PTX ISA's, so a kernel may compute on fragment elements in registers: scale,
// mask and exponentiate an accumulator, and turn it into the A operand of the next product
// (accumulator_to_a) without a trip through shared memory, as FlashAttention-2 does.
//
//   FragA  16x16 bf16 A (row-major), 4 registers of 2 elements    element e of a lane: a_row/a_col
//   FragB  16x8  bf16 B (k x n),     2 registers of 2 elements    b_row (k) / b_col (n)
//   FragC  16x8  f32 accumulator,    4 floats                     c_row / c_col
//   mma(d, a, b)                     d += a b  (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32)
//   ldmatrix_x{1,2,4}[_trans](r, p)  8x8 b16 matrices from shared memory: lane l gives the row
//                                    address p of row l % 8 of matrix l / 8 (16-byte aligned,
//                                    16 contiguous bytes); register i gets matrix i. Without
//                                    .trans lane l holds row l / 4, columns 2 (l % 4) and +1;
//                                    with .trans column l / 4, rows 2 (l % 4) and +1.
//   pack_bf16x2(lo, hi) / unpack      two floats <-> one register (lo in bits 0-15)
//
// Element e (0..7 for A, 0..3 for B and C) of a lane lives in register e / 2, half e % 2. With
// g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"):
//   A: row g + 8 ((e / 2) % 2), column 2 t + e % 2 + 8 (e / 4)
//   B: row (k) 2 t + e % 2 + 8 (e / 2), column (n) g
//   C: row g + 8 (e / 2), column 2 t + e % 2
// So ldmatrix_x4 of the A tile's four 8x8 quadrants in the order (rows 0-7, cols 0-7), (8-15,
// 0-7), (0-7, 8-15), (8-15, 8-15) gives FragA; ldmatrix_x2 of an n-major B (B^T row-major) gives
// FragB, and ldmatrix_x2_trans of a k-major B (row-major k x n) gives it too.
//
// Every call is warp-collective (all 32 lanes, converged). The emulator runs the same contract
// exactly: each lane holds precisely the elements the layout above gives it, so a kernel that
// fills or reads a register with the wrong element computes a wrong result there as on the GPU;
// ldmatrix addresses that are not 16-byte aligned throw. tests/cuda/warp_mma_test.cpp checks
// this map against tables written from the PTX ISA, on the emulator and on a GPU.
#include <cstdint>

#include "kernels/cuda/common.cuh"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#else
#include "kernels/check.h"
#include "kernels/emu/bf16.h"
#endif

namespace tarn::kernels::TARN_CUDA_NS {
namespace warp_mma {

constexpr int kM = 16, kN = 8, kK = 16;

struct FragA {
  uint32_t r[4];
};
struct FragB {
  uint32_t r[2];
};
struct FragC {
  float r[4];
};

__host__ __device__ constexpr int a_row(int lane, int e) { return lane / 4 + 8 * ((e / 2) % 2); }
__host__ __device__ constexpr int a_col(int lane, int e) { return 2 * (lane % 4) + e % 2 + 8 * (e / 4); }
__host__ __device__ constexpr int b_row(int lane, int e) { return 2 * (lane % 4) + e % 2 + 8 * (e / 2); }
__host__ __device__ constexpr int b_col(int lane, int /*e*/) { return lane / 4; }
__host__ __device__ constexpr int c_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
__host__ __device__ constexpr int c_col(int lane, int e) { return 2 * (lane % 4) + e % 2; }

__device__ __forceinline__ void zero(FragC& c) {
  c.r[0] = c.r[1] = c.r[2] = c.r[3] = 0.0f;
}

#if defined(__CUDACC__)

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

__device__ __forceinline__ void mma(FragC& d, const FragA& a, const FragB& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

#else  // the emulator: each lane's registers hold exactly the PTX layout's elements

inline uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(::tarn::bf16_from_float(lo).bits) |
         static_cast<uint32_t>(::tarn::bf16_from_float(hi).bits) << 16;
}
inline float2 unpack_bf16x2(uint32_t v) {
  return make_float2(::tarn::bf16_to_float(::tarn::bf16{static_cast<uint16_t>(v & 0xffffu)}),
                     ::tarn::bf16_to_float(::tarn::bf16{static_cast<uint16_t>(v >> 16)}));
}

namespace emulated {

constexpr int kMaxWarps = 32;  // warps of the largest block (1024 threads)

inline int linear_thread() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
inline float half_of(uint32_t r, int h) {
  const float2 f = unpack_bf16x2(r);
  return h == 0 ? f.x : f.y;
}

// What the lanes of one warp exchange during a collective (one copy per warp of the running
// block, like __shared__).
struct Exchange {
  float a[kM][kK];
  float b[kK][kN];
  const uint16_t* rows[32];
};
inline Exchange& exchange() {
  static thread_local Exchange per_warp[kMaxWarps];
  return per_warp[linear_thread() / 32];
}

// ldmatrix of `count` matrices: lanes 0 .. 8 count - 1 give the rows' addresses.
template <int kCount, bool kTrans>
inline void ldmatrix(uint32_t (&r)[kCount], const void* row, const char* file, int line) {
  const int lane = linear_thread() % 32;
  Exchange& ex = exchange();
  if (lane < 8 * kCount)
    TARN_ASSERT(row && reinterpret_cast<uintptr_t>(row) % 16 == 0, "ldmatrix at ", file, ":", line, ": lane ", lane,
                "'s row address ", row, " is not 16-byte aligned");
  ex.rows[lane] = static_cast<const uint16_t*>(row);
  __syncwarp();  // every lane's address is in
  for (int i = 0; i < kCount; ++i) {
    const uint16_t* const* m = ex.rows + 8 * i;
    const uint16_t lo = kTrans ? m[2 * (lane % 4)][lane / 4] : m[lane / 4][2 * (lane % 4)];
    const uint16_t hi = kTrans ? m[2 * (lane % 4) + 1][lane / 4] : m[lane / 4][2 * (lane % 4) + 1];
    r[i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  }
  __syncwarp();  // every lane has read the addresses before the next call overwrites them
}

}  // namespace emulated

inline void mma(FragC& d, const FragA& a, const FragB& b) {
  const int lane = emulated::linear_thread() % 32;
  emulated::Exchange& ex = emulated::exchange();
  for (int e = 0; e < 8; ++e) ex.a[a_row(lane, e)][a_col(lane, e)] = emulated::half_of(a.r[e / 2], e % 2);
  for (int e = 0; e < 4; ++e) ex.b[b_row(lane, e)][b_col(lane, e)] = emulated::half_of(b.r[e / 2], e % 2);
  __syncwarp();  // every lane's share of A and B is in
  for (int e = 0; e < 4; ++e) {
    // bf16 products are exact in double; the sum is rounded once, then added to the accumulator.
    double sum = 0.0;
    for (int k = 0; k < kK; ++k)
      sum += static_cast<double>(ex.a[c_row(lane, e)][k]) * static_cast<double>(ex.b[k][c_col(lane, e)]);
    d.r[e] += static_cast<float>(sum);
  }
  __syncwarp();  // every lane has read both tiles before the next call overwrites them
}

#define TARN_LDMATRIX_EMULATED(name, count, trans)                                                     \
  inline void name(uint32_t(&r)[count], const void* row, const char* file = __builtin_FILE(),          \
                   int line = __builtin_LINE()) {                                                      \
    emulated::ldmatrix<count, trans>(r, row, file, line);                                              \
  }
TARN_LDMATRIX_EMULATED(ldmatrix_x1, 1, false)
TARN_LDMATRIX_EMULATED(ldmatrix_x2, 2, false)
TARN_LDMATRIX_EMULATED(ldmatrix_x4, 4, false)
TARN_LDMATRIX_EMULATED(ldmatrix_x1_trans, 1, true)
TARN_LDMATRIX_EMULATED(ldmatrix_x2_trans, 2, true)
TARN_LDMATRIX_EMULATED(ldmatrix_x4_trans, 4, true)
#undef TARN_LDMATRIX_EMULATED

#endif

// Operand tiles from bf16 shared memory (ld in elements, a multiple of 8; tile corners at
// multiples of 8): the ldmatrix addressing for each way an operand can be stored.
//   load_a(a, m, ld, r0, c0)           A = M[r0 .. r0+15][c0 .. c0+15]           (M row-major by A's rows)
//   load_a_trans(a, m, ld, r0, c0)     A = (M[r0 .. r0+15][c0 .. c0+15])^T         (M's rows are A's k)
//   load_b_n_major(b, m, ld, n0, k0)   b[i] = B with B[k][n] = M[n0 + 8 i + n][k0 + k], i = 0, 1
//   load_b_k_major(b, m, ld, k0, n0)   b[i] = B with B[k][n] = M[k0 + k][n0 + 8 i + n], i = 0, 1
// (two 16x8 B tiles side by side: the 16 columns n0 .. n0+15 of the product).
__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x % 32); }
template <typename T>
__device__ __forceinline__ void load_a(FragA& a, const T* m, int ld, int r0, int c0) {
  const int l = lane_id();
  ldmatrix_x4(a.r, m + (r0 + l % 16) * ld + c0 + 8 * (l / 16));
}
template <typename T>
__device__ __forceinline__ void load_a_trans(FragA& a, const T* m, int ld, int r0, int c0) {
  const int l = lane_id();
  ldmatrix_x4_trans(a.r, m + (r0 + l % 8 + 8 * (l / 16)) * ld + c0 + 8 * ((l / 8) % 2));
}
template <typename T>
__device__ __forceinline__ void load_b_n_major(FragB (&b)[2], const T* m, int ld, int n0, int k0) {
  const int l = lane_id();
  uint32_t r[4];
  ldmatrix_x4(r, m + (n0 + l % 8 + 8 * (l / 16)) * ld + k0 + 8 * ((l / 8) % 2));
  b[0].r[0] = r[0], b[0].r[1] = r[1], b[1].r[0] = r[2], b[1].r[1] = r[3];
}
template <typename T>
__device__ __forceinline__ void load_b_k_major(FragB (&b)[2], const T* m, int ld, int k0, int n0) {
  const int l = lane_id();
  uint32_t r[4];
  ldmatrix_x4_trans(r, m + (k0 + l % 8 + 8 * ((l / 8) % 2)) * ld + n0 + 8 * (l / 16));
  b[0].r[0] = r[0], b[0].r[1] = r[1], b[1].r[0] = r[2], b[1].r[1] = r[3];
}

// The accumulators of a 16x16 product (two 16x8 tiles, columns 0-7 and 8-15) as the A operand of
// the next product, rounded to bf16: C's layout of the pair is A's, register for register.
__device__ __forceinline__ FragA accumulator_to_a(const FragC& left, const FragC& right) {
  FragA a;
  a.r[0] = pack_bf16x2(left.r[0], left.r[1]);
  a.r[1] = pack_bf16x2(left.r[2], left.r[3]);
  a.r[2] = pack_bf16x2(right.r[0], right.r[1]);
  a.r[3] = pack_bf16x2(right.r[2], right.r[3]);
  return a;
}

}  // namespace warp_mma
}  // namespace tarn::kernels::TARN_CUDA_NS
