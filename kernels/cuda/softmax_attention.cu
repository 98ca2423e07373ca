// Softmax attention on CUDA, FlashAttention-2 style (Dao 2023): the entry points of
// kernels/softmax_attention.h on device buffers (declared in kernels/cuda_softmax_attention.h).
// No N x N matrix is ever stored; memory is the tensors plus lse (forward) and D (backward).
//
//   forward    one block per (batch*head, tile of kTile queries): the key tiles stream through
//              shared memory past the query tile; an online softmax keeps the running row max m
//              and sum l in f32 registers and rescales the output accumulator when m grows;
//              writes out = acc / l and lse = m + log(l) (+inf for a query that sees no key).
//   delta      D_i = dO_i . O_i, one warp per row (the backward's workspace).
//   dK, dV     one block per (batch*head, tile of kTile keys), looping over tiles of
//              bwd_query_tile() queries: P^T = exp(scale K Q^T - lse) recomputed, dP^T = V dO^T,
//              dS^T = P^T o (dP^T - D) scale, then dV += P^T dO and dK += dS^T Q in registers.
//   dQ         one block per (batch*head, tile of kTile queries), looping over key tiles:
//              the same P and dS, then dQ += dS K in registers.
// Each gradient element is summed by one thread in a fixed order: no atomics, deterministic.
//
// Tiles in shared memory are row-major with row stride ld = 16 kC + kPad (kC = output columns
// per thread / 16 is fixed at compile time from max(d, e): 32, 64 or 128). A block is 16 x 16
// threads; thread (ty, tx) owns rows ty + 16 r of every product tile and columns tx + 16 c of
// the score tiles (S, dP), so the 16 threads of one row are the 16 lanes of a half-warp (row
// reductions are 4 shuffles) and the float4 reads of a quarter-warp fall on distinct banks (ld
// is 4 times an odd number); its columns of the accumulators (O, dK, dV, dQ) are out_col().
// Products come in two shapes: "NT" (both operands have the reduction contiguous: S = Q K^T,
// dP = dO V^T) read float4 from both; "NN" (O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K)
// read float4 from the left operand and, per reduction step, one float4 (float2) per group of
// adjacent output columns from the right one.
//
// Barriers per tile step: __syncthreads() after the loads (every thread reads every loaded row)
// and at the end of the step (the next loads overwrite what this one reads). Between writing P
// (or dS) and the NN product that reads it, __syncwarp() is enough: thread (ty, tx) writes rows
// ty + 16 r and reads back only rows ty + 16 r, and a warp holds all 16 threads of its two ty.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_softmax_attention.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::SoftmaxAttentionConfig;
using cpu::KeyRange;
using cpu::OffsetBand;
using cpu::keys_of_block;
using cpu::queries_of_block;
using cpu::visible_keys;
using cpu::SoftmaxAttentionDims;

constexpr int kGrid = 16;                  // threads along each side of a block's output tile
constexpr int kThreads = kGrid * kGrid;    // threads per block
constexpr int kTile = 64;                  // query or key rows per tile (rows kGrid * kRows)
constexpr int kRows = kTile / kGrid;       // tile rows (and key columns of S) per thread
constexpr int kPad = 4;                    // row padding: float4 alignment, staggered banks
constexpr int kMaxDim = 128;               // largest d and e
constexpr size_t kDefaultSmem = 48 * 1024; // dynamic shared memory without opting in

struct Shape {
  int64_t slices, heads, n_q, n_k;
  int d, e;
  int d4, e4;       // d and e rounded up to 4: the reduction lengths of the NT products
  float scale;
  int causal;
  int64_t window;    // sliding window, 0 = none (kernels/softmax_attention.h)
  OffsetBand band;   // the causal mask and the window as offsets j - i (visible_offsets)
  const float* pad;  // (batch, n_k) key padding flags or null
  int64_t tiles;     // tiles per slice of the launched kernel
};

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
// n rounded up to a multiple of 4 (the float4 step of the products; tiles are zero there).
__device__ __forceinline__ int round4(int64_t n) { return static_cast<int>((n + 3) / 4 * 4); }

// dst (tile_rows x ld) <- rows [row0, row0 + tile_rows) of src (rows x width, row-major), with
// zeros past the last row and in columns [width, cols): the products read only [0, cols). Whole
// float4 per thread when the rows are 16-byte aligned (width a multiple of 4, src aligned; the
// same for every thread of the block), else one float at a time.
__device__ __forceinline__ void load_rows(float* dst, int ld, int tile_rows, int cols, const float* src, int64_t row0,
                                          int64_t rows, int width) {
  if (width % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int quads = cols / 4;  // cols is a multiple of 16
    for (int idx = threadIdx.x; idx < tile_rows * quads; idx += blockDim.x) {
      const int i = idx / quads, c = 4 * (idx % quads);
      const int64_t row = row0 + i;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row < rows && c < width) x = *reinterpret_cast<const float4*>(src + row * width + c);
      *reinterpret_cast<float4*>(dst + i * ld + c) = x;
    }
    return;
  }
  for (int idx = threadIdx.x; idx < tile_rows * cols; idx += blockDim.x) {
    const int i = idx / cols, c = idx % cols;
    const int64_t row = row0 + i;
    dst[i * ld + c] = (row < rows && c < width) ? src[row * width + c] : 0.0f;
  }
}

// acc[r][c] += a[ty + 16 r][0, len) . b[tx + 16 c][0, len); len a multiple of 4 ("NT").
template <int R, int C>
__device__ __forceinline__ void tile_nt(const float* a, int lda, const float* b, int ldb, int len, int ty, int tx,
                                        float (&acc)[R][C]) {
  for (int k = 0; k < len; k += 4) {
    float4 av[R], bv[C];
#pragma unroll
    for (int r = 0; r < R; ++r) av[r] = *reinterpret_cast<const float4*>(a + (ty + kGrid * r) * lda + k);
#pragma unroll
    for (int c = 0; c < C; ++c) bv[c] = *reinterpret_cast<const float4*>(b + (tx + kGrid * c) * ldb + k);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float s = acc[r][c];
        s = fmaf(av[r].x, bv[c].x, s);
        s = fmaf(av[r].y, bv[c].y, s);
        s = fmaf(av[r].z, bv[c].z, s);
        s = fmaf(av[r].w, bv[c].w, s);
        acc[r][c] = s;
      }
    }
  }
}

// Column of the c-th output accumulator of thread tx in an NN product: groups of kVec adjacent
// columns (tx kVec + [0, kVec)), 16 kVec apart, so that the right operand's row is read as one
// float4 (float2 when C = 2) per group: 16 lanes read 64 adjacent floats, 2 wavefronts.
template <int C>
__host__ __device__ constexpr int nn_vec() { return C < 4 ? C : 4; }
template <int C>
__device__ __forceinline__ int out_col(int tx, int c) {
  return (c / nn_vec<C>()) * (kGrid * nn_vec<C>()) + tx * nn_vec<C>() + c % nn_vec<C>();
}

// acc[r][c] += a[ty + 16 r][k] b_row[out_col(tx, c)] for one reduction step k of an NN product.
template <int R, int C>
__device__ __forceinline__ void nn_step(const float (&a)[R], const float* b_row, int tx, float (&acc)[R][C]) {
  constexpr int kVec = nn_vec<C>();
  static_assert(kVec == 2 || kVec == 4, "NN products hold 2, 4 or a multiple of 4 columns per thread");
  float b[C];
#pragma unroll
  for (int g = 0; g < C / kVec; ++g) {
    const float* src = b_row + g * kGrid * kVec + tx * kVec;
    if (kVec == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src);
      b[4 * g] = x.x, b[4 * g + 1] = x.y, b[4 * g + 2] = x.z, b[4 * g + 3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src);
      b[2 * g] = x.x, b[2 * g + 1] = x.y;
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
}

// acc[r][c] += sum_{k < len} a[ty + 16 r][k] b[k][out_col(tx, c)]; len a multiple of 4 ("NN").
template <int R, int C>
__device__ __forceinline__ void tile_nn(const float* a, int lda, const float* b, int ldb, int len, int ty, int tx,
                                        float (&acc)[R][C]) {
  for (int k = 0; k < len; k += 4) {
    float4 av[R];
#pragma unroll
    for (int r = 0; r < R; ++r) av[r] = *reinterpret_cast<const float4*>(a + (ty + kGrid * r) * lda + k);
    float ax[R], ay[R], az[R], aw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) ax[r] = av[r].x, ay[r] = av[r].y, az[r] = av[r].z, aw[r] = av[r].w;
    nn_step(ax, b + (k + 0) * ldb, tx, acc);
    nn_step(ay, b + (k + 1) * ldb, tx, acc);
    nn_step(az, b + (k + 2) * ldb, tx, acc);
    nn_step(aw, b + (k + 3) * ldb, tx, acc);
  }
}

// Reduces over the 16 lanes of a half-warp (the threads of one tile row); all 32 lanes call it.
template <typename Op>
__device__ __forceinline__ float row_reduce(float v, Op op) {
  for (int m = kGrid / 2; m > 0; m /= 2) v = op(v, __shfl_xor_sync(device::kFullMask, v, m));
  return v;
}

// Whether query i sees key j (causal: j <= i; the window; padded keys and keys past n_k are
// invisible).
__device__ __forceinline__ bool visible(const Shape& sh, const float* pad, int64_t i, int64_t j) {
  if (i >= sh.n_q || j >= sh.n_k || (pad && pad[j] != 0.0f)) return false;
  return j - i >= sh.band.lo && j - i <= sh.band.hi;
}

// Whether every key of [j0, j0 + keys) is visible to every query of [i0, i0 + rows): then a
// tile step skips the per-element mask. Block-uniform. Query rows past n_q need no mask: they
// are zero rows whose results are never stored (forward), or have lse = +inf and so P = 0
// (backward). A query's first and last visible keys never decrease with i, so the first query
// bounds the end and the last real one the beginning.
__device__ __forceinline__ bool tile_unmasked(const Shape& sh, const float* pad, int64_t i0, int rows, int64_t j0,
                                              int keys) {
  if (pad || j0 + keys > sh.n_k) return false;
  const int64_t last = min64(i0 + rows, sh.n_q) - 1;
  return visible_keys(i0, sh.n_k, sh.causal != 0, sh.window).end >= j0 + keys &&
         visible_keys(last, sh.n_k, sh.causal != 0, sh.window).begin <= j0;
}

// The keys a query tile [i0, i0 + kTile) reads, from a multiple of kTile (causal and window
// skip the rest).
__device__ __forceinline__ KeyRange key_span(const Shape& sh, int64_t i0) {
  const KeyRange keys = keys_of_block(i0, kTile, sh.n_q, sh.n_k, sh.causal != 0, sh.window);
  return {keys.begin / kTile * kTile, keys.end};
}

// Output columns per thread / 16 for max(d, e) of a problem: the kC template argument.
__host__ __device__ constexpr int column_chunks(int64_t width) { return width <= 32 ? 2 : width <= 64 ? 4 : 8; }
__host__ __device__ constexpr int row_stride(int kc) { return kGrid * kc + kPad; }

// Blocks per SM the forward asks ptxas to fit (registers <= 80): 3 for d, e <= 64, whose 68 KiB
// of shared memory allow 3; 1 at 128 (116 KiB: one block; 3 would spill).
__host__ __device__ constexpr int forward_min_blocks(int kc) { return kc <= 4 ? 3 : 1; }
// The backward kernels: 2 blocks (registers <= 128) for d, e <= 64 (dK/dV 103 KiB, dQ 85 KiB
// of shared memory), 1 at 128.
__host__ __device__ constexpr int backward_min_blocks(int kc) { return kc <= 4 ? 2 : 1; }

// Query rows per tile of the dK/dV kernel: 64, or 32 at d, e > 64 so that its shared memory
// fits sm_80's 163 KiB (and two blocks fit sm_90's 227 KiB at d, e <= 64).
__host__ __device__ constexpr int bwd_query_tile(int kc) { return kc <= 4 ? 64 : 32; }

// Floats of dynamic shared memory per kernel.
constexpr size_t forward_smem_floats(int kc) {
  return size_t{3} * kTile * row_stride(kc) + size_t{kTile} * (kTile + kPad);
}
constexpr size_t dkdv_smem_floats(int kc) {
  return size_t{2} * kTile * row_stride(kc) + size_t{2} * bwd_query_tile(kc) * row_stride(kc) +
         size_t{2} * kTile * (bwd_query_tile(kc) + kPad) + size_t{2} * bwd_query_tile(kc);
}
constexpr size_t dq_smem_floats(int kc) {
  return size_t{4} * kTile * row_stride(kc) + size_t{kTile} * (kTile + kPad);
}

// q: (B,H,Nq,d) k: (B,H,Nk,d) v: (B,H,Nk,e) -> out: (B,H,Nq,e) lse: (B,H,Nq).
// grid: slices * query tiles, the last query tiles first (under causal masking they see the
// most keys). Barriers: the tiles are loaded, then read (S); P is written, then read back by
// the same warp (P V); the next loads overwrite K and V only after the barrier that ends the step.
template <int kC>
__global__ void __launch_bounds__(kThreads, forward_min_blocks(kC))
    softmax_attention_forward_kernel(Shape sh, const float* q, const float* k, const float* v, float* out, float* lse) {
  TARN_DYNAMIC_SHARED(float, smem);
  constexpr int ld = row_stride(kC), cols = kGrid * kC, ldp = kTile + kPad;
  float* qs = smem;             // kTile x ld
  float* ks = qs + kTile * ld;  // kTile x ld
  float* vs = ks + kTile * ld;  // kTile x ld
  float* ps = vs + kTile * ld;  // kTile x ldp
  const int tx = threadIdx.x % kGrid, ty = threadIdx.x / kGrid;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t i0 = (sh.tiles - 1 - static_cast<int64_t>(blockIdx.x) / sh.slices) * kTile;
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  const float* kb = k + bh * sh.n_k * sh.d;
  const float* vb = v + bh * sh.n_k * sh.e;
  load_rows(qs, ld, kTile, cols, q + bh * sh.n_q * sh.d, i0, sh.n_q, sh.d);

  float acc[kRows][kC], m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[r][c] = 0.0f;
  }
  const KeyRange span = key_span(sh, i0);
  for (int64_t j0 = span.begin; j0 < span.end; j0 += kTile) {
    load_rows(ks, ld, kTile, cols, kb, j0, sh.n_k, sh.d);
    load_rows(vs, ld, kTile, cols, vb, j0, sh.n_k, sh.e);
    __syncthreads();
    float s[kRows][kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kRows; ++c) s[r][c] = 0.0f;
    tile_nt(qs, ld, ks, ld, sh.d4, ty, tx, s);
    const bool unmasked = tile_unmasked(sh, pad, i0, kTile, j0, kTile);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t i = i0 + ty + kGrid * r;
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < kRows; ++c) {
        s[r][c] = unmasked || visible(sh, pad, i, j0 + tx + kGrid * c) ? s[r][c] * sh.scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[r][c]);
      }
      const float m_new = fmaxf(m[r], row_reduce(tile_max, device::Max()));
      // Online softmax: rescale what was accumulated under the old max. While the row has seen
      // nothing (m_new = -inf) any finite shift gives p = 0, alpha = 0 and keeps l = acc = 0.
      const float shift = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = expf(m[r] - shift);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kRows; ++c) {
        const float p = expf(s[r][c] - shift);
        sum += p;
        ps[(ty + kGrid * r) * ldp + tx + kGrid * c] = p;
      }
      l[r] = l[r] * alpha + row_reduce(sum, device::Sum());
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kC; ++c) acc[r][c] *= alpha;
    }
    __syncwarp();  // P (dS) rows are warp-private: see the header
    tile_nn(ps, ldp, vs, ld, round4(min64(kTile, sh.n_k - j0)), ty, tx, acc);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + ty + kGrid * r;
    if (i >= sh.n_q) continue;
    const bool empty = l[r] == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / l[r];
    float* orow = out + (bh * sh.n_q + i) * sh.e;
#pragma unroll
    for (int c = 0; c < kC; ++c)
      if (out_col<kC>(tx, c) < sh.e) orow[out_col<kC>(tx, c)] = acc[r][c] * inv;
    if (tx == 0) lse[bh * sh.n_q + i] = empty ? INFINITY : m[r] + logf(l[r]);
  }
}

// dvec (rows) = rowsum(dout o out), dout, out: (rows, e); one warp per row.
__global__ void softmax_attention_delta_kernel(const float* dout, const float* out, float* dvec, int64_t rows, int e) {
  const int lane = threadIdx.x % device::kWarp;
  const int64_t warp = device::global_index() / device::kWarp;
  const int64_t warps = device::global_stride() / device::kWarp;
  for (int64_t i = warp; i < rows; i += warps) {
    float dot = 0.0f;
    for (int c = lane; c < e; c += device::kWarp) dot += dout[i * e + c] * out[i * e + c];
    dot = device::warp_reduce(dot, device::Sum());
    if (lane == 0) dvec[i] = dot;
  }
}

// dk: (B,H,Nk,d) dv: (B,H,Nk,e), either may be null. grid: slices * key tiles, the first key
// tiles first (under causal masking the most queries see them). Thread (ty, tx) holds the
// transposed scores of keys ty + 16 r and queries tx + 16 c, and dK, dV of keys ty + 16 r.
template <int kC>
__global__ void __launch_bounds__(kThreads, backward_min_blocks(kC))
    softmax_attention_dkdv_kernel(Shape sh, const float* q, const float* k, const float* v, const float* dout,
                                  const float* lse, const float* dvec, float* dk, float* dv) {
  TARN_DYNAMIC_SHARED(float, smem);
  constexpr int kTq = bwd_query_tile(kC), kQCols = kTq / kGrid;  // query rows per tile, per thread
  constexpr int ld = row_stride(kC), cols = kGrid * kC, ldp = kTq + kPad;
  float* ks = smem;                   // kTile x ld
  float* vs = ks + kTile * ld;        // kTile x ld
  float* qs = vs + kTile * ld;        // kTq x ld
  float* dos = qs + kTq * ld;         // kTq x ld
  float* pts = dos + kTq * ld;         // kTile x ldp: P^T
  float* dsts = pts + kTile * ldp;    // kTile x ldp: dS^T
  float* lse_s = dsts + kTile * ldp;  // kTq
  float* d_s = lse_s + kTq;           // kTq
  const int tx = threadIdx.x % kGrid, ty = threadIdx.x / kGrid;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) / sh.slices * kTile;
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  const float* qb = q + bh * sh.n_q * sh.d;
  const float* dob = dout + bh * sh.n_q * sh.e;
  load_rows(ks, ld, kTile, cols, k + bh * sh.n_k * sh.d, j0, sh.n_k, sh.d);
  load_rows(vs, ld, kTile, cols, v + bh * sh.n_k * sh.e, j0, sh.n_k, sh.e);

  float dk_acc[kRows][kC], dv_acc[kRows][kC];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int c = 0; c < kC; ++c) dk_acc[r][c] = dv_acc[r][c] = 0.0f;
  // Only the query tiles that see some key of this tile (causal: none before j0; window).
  const KeyRange queries = queries_of_block(j0, kTile, sh.n_q, sh.n_k, sh.causal != 0, sh.window);
  for (int64_t i0 = queries.begin / kTq * kTq; i0 < queries.end; i0 += kTq) {
    load_rows(qs, ld, kTq, cols, qb, i0, sh.n_q, sh.d);
    load_rows(dos, ld, kTq, cols, dob, i0, sh.n_q, sh.e);
    for (int t = threadIdx.x; t < kTq; t += blockDim.x) {
      const int64_t i = i0 + t;
      lse_s[t] = i < sh.n_q ? lse[bh * sh.n_q + i] : INFINITY;
      d_s[t] = i < sh.n_q ? dvec[bh * sh.n_q + i] : 0.0f;
    }
    __syncthreads();
    float st[kRows][kQCols], dpt[kRows][kQCols];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kQCols; ++c) st[r][c] = dpt[r][c] = 0.0f;
    tile_nt(ks, ld, qs, ld, sh.d4, ty, tx, st);
    tile_nt(vs, ld, dos, ld, sh.e4, ty, tx, dpt);
    const bool unmasked = tile_unmasked(sh, pad, i0, kTq, j0, kTile);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kQCols; ++c) {
        const int t = tx + kGrid * c;
        // P = exp(S - lse): 0 where invisible or where the query sees no key (lse = +inf).
        const bool seen = unmasked || visible(sh, pad, i0 + t, j0 + ty + kGrid * r);
        const float p = seen ? expf(st[r][c] * sh.scale - lse_s[t]) : 0.0f;
        pts[(ty + kGrid * r) * ldp + t] = p;
        dsts[(ty + kGrid * r) * ldp + t] = p * (dpt[r][c] - d_s[t]) * sh.scale;
      }
    }
    __syncwarp();  // P (dS) rows are warp-private: see the header
    const int len = round4(min64(kTq, sh.n_q - i0));
    tile_nn(pts, ldp, dos, ld, len, ty, tx, dv_acc);   // dV += P^T dO
    tile_nn(dsts, ldp, qs, ld, len, ty, tx, dk_acc);   // dK += dS^T Q
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t j = j0 + ty + kGrid * r;
    if (j >= sh.n_k) continue;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int col = out_col<kC>(tx, c);
      if (dk && col < sh.d) dk[(bh * sh.n_k + j) * sh.d + col] = dk_acc[r][c];
      if (dv && col < sh.e) dv[(bh * sh.n_k + j) * sh.e + col] = dv_acc[r][c];
    }
  }
}

// dq: (B,H,Nq,d). grid: slices * query tiles, the last first. Thread (ty, tx) holds the
// scores of queries ty + 16 r and keys tx + 16 c, and dQ of queries ty + 16 r.
template <int kC>
__global__ void __launch_bounds__(kThreads, backward_min_blocks(kC))
    softmax_attention_dq_kernel(Shape sh, const float* q, const float* k, const float* v, const float* dout,
                                const float* lse, const float* dvec, float* dq) {
  TARN_DYNAMIC_SHARED(float, smem);
  constexpr int ld = row_stride(kC), cols = kGrid * kC, ldp = kTile + kPad;
  float* qs = smem;               // kTile x ld
  float* dos = qs + kTile * ld;   // kTile x ld
  float* ks = dos + kTile * ld;   // kTile x ld
  float* vs = ks + kTile * ld;    // kTile x ld
  float* dss = vs + kTile * ld;   // kTile x ldp: dS
  const int tx = threadIdx.x % kGrid, ty = threadIdx.x / kGrid;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t i0 = (sh.tiles - 1 - static_cast<int64_t>(blockIdx.x) / sh.slices) * kTile;
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  const float* kb = k + bh * sh.n_k * sh.d;
  const float* vb = v + bh * sh.n_k * sh.e;
  load_rows(qs, ld, kTile, cols, q + bh * sh.n_q * sh.d, i0, sh.n_q, sh.d);
  load_rows(dos, ld, kTile, cols, dout + bh * sh.n_q * sh.e, i0, sh.n_q, sh.e);
  float lse_r[kRows], d_r[kRows], dq_acc[kRows][kC];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + ty + kGrid * r;
    lse_r[r] = i < sh.n_q ? lse[bh * sh.n_q + i] : INFINITY;
    d_r[r] = i < sh.n_q ? dvec[bh * sh.n_q + i] : 0.0f;
#pragma unroll
    for (int c = 0; c < kC; ++c) dq_acc[r][c] = 0.0f;
  }
  const KeyRange span = key_span(sh, i0);
  for (int64_t j0 = span.begin; j0 < span.end; j0 += kTile) {
    load_rows(ks, ld, kTile, cols, kb, j0, sh.n_k, sh.d);
    load_rows(vs, ld, kTile, cols, vb, j0, sh.n_k, sh.e);
    __syncthreads();
    float s[kRows][kRows], dp[kRows][kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < kRows; ++c) s[r][c] = dp[r][c] = 0.0f;
    tile_nt(qs, ld, ks, ld, sh.d4, ty, tx, s);
    tile_nt(dos, ld, vs, ld, sh.e4, ty, tx, dp);
    const bool unmasked = tile_unmasked(sh, pad, i0, kTile, j0, kTile);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kRows; ++c) {
        const int64_t i = i0 + ty + kGrid * r, j = j0 + tx + kGrid * c;
        const float p = unmasked || visible(sh, pad, i, j) ? expf(s[r][c] * sh.scale - lse_r[r]) : 0.0f;
        dss[(ty + kGrid * r) * ldp + tx + kGrid * c] = p * (dp[r][c] - d_r[r]) * sh.scale;
      }
    }
    __syncwarp();  // P (dS) rows are warp-private: see the header
    tile_nn(dss, ldp, ks, ld, round4(min64(kTile, sh.n_k - j0)), ty, tx, dq_acc);  // dQ += dS K
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + ty + kGrid * r;
    if (i >= sh.n_q) continue;
#pragma unroll
    for (int c = 0; c < kC; ++c)
      if (out_col<kC>(tx, c) < sh.d) dq[(bh * sh.n_q + i) * sh.d + out_col<kC>(tx, c)] = dq_acc[r][c];
  }
}

void check_args(const char* op, const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg) {
  TARN_ASSERT(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
              ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q, ", Nk=", dims.n_k, ")");
  TARN_ASSERT(dims.d > 0 && dims.e > 0 && dims.d <= kMaxDim && dims.e <= kMaxDim, op, ": head dim d=", dims.d,
              " and value dim e=", dims.e, " must be in [1, ", kMaxDim, "] for the CUDA kernels");
  TARN_ASSERT(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=", dims.n_q,
              " Nk=", dims.n_k);
  // The CPU's blocking, ignored here; 0 (the default) leaves it to the CPU kernel.
  TARN_ASSERT(cfg.block_q >= 0 && cfg.block_k >= 0, op,
              ": block sizes must be 0 (the kernel's choice) or positive, got ", cfg.block_q, " x ", cfg.block_k);
  TARN_ASSERT(cfg.window >= 0, op, ": window must be >= 0, got ", cfg.window);
}

Shape make_shape(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg, int64_t tiles) {
  Shape sh{};
  sh.slices = dims.batch * dims.heads, sh.heads = dims.heads, sh.n_q = dims.n_q, sh.n_k = dims.n_k;
  sh.d = static_cast<int>(dims.d), sh.e = static_cast<int>(dims.e);
  sh.d4 = (sh.d + 3) / 4 * 4, sh.e4 = (sh.e + 3) / 4 * 4;
  sh.scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(static_cast<float>(dims.d));
  sh.causal = cfg.causal ? 1 : 0;
  sh.window = cfg.window;
  sh.band = cpu::visible_offsets(cfg.causal, cfg.window);
  sh.pad = cfg.key_padding_mask;
  sh.tiles = tiles;
  return sh;
}

int64_t tiles_of(int64_t n, int tile) { return (n + tile - 1) / tile; }

// One block per (slice, tile): the grid's x extent, checked against the hardware limit.
unsigned grid_of(const char* op, const Shape& sh) {
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  const int64_t blocks = sh.slices * sh.tiles;
  TARN_ASSERT(blocks <= kMaxGridX, op, ": ", sh.slices, " (batch, head) pairs x ", sh.tiles,
              " tiles exceed one grid");
  return static_cast<unsigned>(blocks);
}

// Launches `kernel` with `floats` of dynamic shared memory, opting in above the default.
template <typename... P, typename... A>
void launch_tiles(const char* op, void (*kernel)(P...), const Shape& sh, size_t floats, A&&... args) {
  const size_t smem = floats * sizeof(float);
  if (smem > kDefaultSmem)
    TARN_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  tarn::launch(kernel, grid_of(op, sh), kThreads, smem, nullptr, sh, std::forward<A>(args)...);
}

template <int kC>
void forward_with(const Shape& sh, const float* q, const float* k, const float* v, float* out, float* lse) {
  launch_tiles("softmax_attention_forward", softmax_attention_forward_kernel<kC>, sh, forward_smem_floats(kC), q, k,
               v, out, lse);
}

template <int kC>
void dkdv_with(const Shape& sh, const float* q, const float* k, const float* v, const float* dout, const float* lse,
               const float* dvec, float* dk, float* dv) {
  launch_tiles("softmax_attention_backward", softmax_attention_dkdv_kernel<kC>, sh, dkdv_smem_floats(kC), q, k, v,
               dout, lse, dvec, dk, dv);
}

template <int kC>
void dq_with(const Shape& sh, const float* q, const float* k, const float* v, const float* dout, const float* lse,
             const float* dvec, float* dq) {
  launch_tiles("softmax_attention_backward", softmax_attention_dq_kernel<kC>, sh, dq_smem_floats(kC), q, k, v, dout,
               lse, dvec, dq);
}

}  // namespace

size_t softmax_attention_forward_workspace_floats(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg) {
  check_args("softmax_attention_forward", dims, cfg);
  return 0;
}

void softmax_attention_forward(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg, const float* q,
                               const float* k, const float* v, float* out, float* lse, float* workspace,
                               size_t workspace_floats) {
  check_args("softmax_attention_forward", dims, cfg);
  (void)workspace, (void)workspace_floats;
  const Shape sh = make_shape(dims, cfg, tiles_of(dims.n_q, kTile));
  if (sh.slices == 0 || dims.n_q == 0) return;
  switch (column_chunks(std::max(dims.d, dims.e))) {
    case 2: forward_with<2>(sh, q, k, v, out, lse); break;
    case 4: forward_with<4>(sh, q, k, v, out, lse); break;
    default: forward_with<8>(sh, q, k, v, out, lse); break;
  }
}

size_t softmax_attention_backward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                   const SoftmaxAttentionConfig& cfg) {
  check_args("softmax_attention_backward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q);
}

void softmax_attention_backward(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg, const float* q,
                                const float* k, const float* v, const float* out, const float* lse, const float* dout,
                                float* dq, float* dk, float* dv, float* workspace, size_t workspace_floats) {
  const char* op = "softmax_attention_backward";
  check_args(op, dims, cfg);
  if (!dq && !dk && !dv) return;
  const size_t need = TARN_CUDA_NS::softmax_attention_backward_workspace_floats(dims, cfg);
  TARN_ASSERT(need == 0 || (workspace && workspace_floats >= need), op, ": workspace of ", workspace_floats,
              " floats is smaller than the ", need, " it needs");
  const int64_t slices = dims.batch * dims.heads, rows = slices * dims.n_q;
  if (slices == 0) return;
  if (rows > 0)
    tarn::launch(softmax_attention_delta_kernel, device::grid_for(rows * device::kWarp), device::kBlock, 0, nullptr,
                 dout, out, workspace, rows, static_cast<int>(dims.e));
  const float* dvec = workspace;
  const int kc = column_chunks(std::max(dims.d, dims.e));
  if ((dk || dv) && dims.n_k > 0) {
    const Shape sh = make_shape(dims, cfg, tiles_of(dims.n_k, kTile));
    switch (kc) {
      case 2: dkdv_with<2>(sh, q, k, v, dout, lse, dvec, dk, dv); break;
      case 4: dkdv_with<4>(sh, q, k, v, dout, lse, dvec, dk, dv); break;
      default: dkdv_with<8>(sh, q, k, v, dout, lse, dvec, dk, dv); break;
    }
  }
  if (dq && dims.n_q > 0) {
    const Shape sh = make_shape(dims, cfg, tiles_of(dims.n_q, kTile));
    switch (kc) {
      case 2: dq_with<2>(sh, q, k, v, dout, lse, dvec, dq); break;
      case 4: dq_with<4>(sh, q, k, v, dout, lse, dvec, dq); break;
      default: dq_with<8>(sh, q, k, v, dout, lse, dvec, dq); break;
    }
  }
}

}  // namespace tarn::kernels::TARN_CUDA_NS
