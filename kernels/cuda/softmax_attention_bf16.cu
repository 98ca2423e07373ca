// bf16 softmax attention on CUDA (kernels/cuda_softmax_attention_bf16.h): the FlashAttention-2
// passes of softmax_attention.cu, with every tile product on tensor cores instead of f32 FMAs:
//
//   forward   one block per (batch*head, tile of 64 queries), the last tiles first (under causal
//             masking they see the most keys); key tiles stream through shared memory:
//               S = Q K^T (f32), the online softmax on S (row max m, row sum l, in f32 registers,
//               a lane quad per two rows), P = exp(scale S - m) rounded to bf16, O = alpha O + P V,
//             all in mma.sync accumulators (kernels/cuda/warp_mma.cuh: the PTX layout, so a lane
//             knows its elements' rows and columns): S, P and O never touch shared memory, and P
//             is the A operand of P V straight from registers. K, V and key flags are double-
//             buffered: tile t + 1 arrives by cp.async (kernels/cuda/async_copy.cuh) during tile t.
//             out = O / l (bf16), lse = m + log l (+inf for a query that sees no key).
//   delta     D_i = dO_i . O_i in f32, one warp per row (the backward's workspace).
//   dK, dV    one block per (batch*head, tile of 64 keys), looping over query tiles:
//               S^T = K Q^T, dP^T = V dO^T, P^T = exp(scale S^T - lse), dS^T = P^T o (dP^T - D) scale
//               (both rounded to bf16), dV += P^T dO and dK += dS^T Q in accumulator fragments.
//   dQ        one block per (batch*head, tile of 64 queries), looping over key tiles: the same S,
//             dP and dS, then dQ += dS K.
// Each gradient element is summed by one warp in a fixed order: no atomics, deterministic.
// The backward, like the forward, keeps S, dP, P and dS in mma.sync accumulators at every width
// (kDim 32, 64, 128 covers the padded d and e), P and dS the A operands of the gradient products
// straight from registers. At kDim = 128 dK and dV alone take 128 accumulator registers a lane,
// so the dK, dV kernel takes each query tile in four passes of 16 queries (S^T, dP^T of 16 x 16
// per warp instead of 16 x 64, as FlashAttention-2's backward narrows its tiles at head dim 128):
// the same products in the same order, no spills (tools/check_register_budget.py; passes of 32
// queries spill at sm_90). dQ's 64 accumulators leave room for whole 16 x 64 tiles.
//
// Each block is 4 warps; warp w owns rows 16 w .. 16 w + 15 of the block's tile (queries in the
// forward and dQ, keys in dK, dV) and computes their 16 x 64 score tiles; each lane holds rows g
// and g + 8 of them (g = lane / 4), columns 2 (lane % 4) and + 1 of each 8. Rows of q, k, v, dout
// are copied to shared memory as bf16, zero-padded to 64 rows and to a multiple of 16 columns.
// Under causal masking or a window, 16x16 tiles the mask hides entirely are neither computed nor
// multiplied.
//
// Barriers per tile step: __syncthreads() after the loads (every warp reads every loaded row) and
// at the end of the step (the next loads overwrite what this one reads). Scores never pass
// through shared memory, so no warp-level barrier is needed between them.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/warp_mma.cuh"
#include "kernels/cuda_softmax_attention_bf16.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::SoftmaxAttentionConfig;
using cpu::KeyRange;
using cpu::OffsetBand;
using cpu::keys_of_block;
using cpu::queries_of_block;
using cpu::SoftmaxAttentionDims;
using mma::bf16;
namespace wm = warp_mma;

constexpr int kT = mma::kTile;                     // 16: rows, columns and depth of a fragment
constexpr int kTile = 64;                          // query or key rows per block tile
constexpr int kTiles = kTile / kT;                 // 16-row tiles per block tile
constexpr int kWarps = kTiles;                     // a warp per 16 rows
constexpr int kThreads = kWarps * device::kWarp;
constexpr int kMaxDim = 128;                       // largest d and e
constexpr int kPadBf16 = 8;                        // row padding: staggered banks, ld a multiple of 8
constexpr size_t kDefaultSmem = 48 * 1024;         // dynamic shared memory without opting in

inline const bf16* device_bf16(const ::tarn::bf16* p) { return reinterpret_cast<const bf16*>(p); }
inline bf16* device_bf16(::tarn::bf16* p) { return reinterpret_cast<bf16*>(p); }

struct Shape {
  int64_t slices, heads, n_q, n_k;
  int d, e;          // widths of q and k, of v
  int pd, pe;        // the same rounded up to 16: the tiles' widths
  float scale;
  int causal;
  int64_t window;    // sliding window, 0 = none (kernels/softmax_attention.h)
  OffsetBand band;   // the causal mask and the window as offsets j - i (visible_offsets)
  const float* pad;  // (batch, n_k) key padding flags or null
  int64_t tiles;     // tiles per slice of the launched kernel
};

// Every pass keeps its scores in registers; the backward's passes also hold dO rows, and dK, dV
// its query tile's lse and D.
enum class Pass { forward, dkdv, dq };

// Byte offsets of a pass's shared memory; each part starts on 128 bytes (ldmatrix needs 16).
struct Layout {
  int ldd, lde;  // bf16 rows of width pd, of width pe
  size_t q, k, v, dout, key_ok, lse, delta, bytes;
  size_t k2, v2, key_ok2;  // the forward's second K, V buffers: the next tile loads while this one computes
};

__host__ __device__ __forceinline__ size_t round128(size_t b) { return (b + 127) / 128 * 128; }

__host__ __device__ __forceinline__ Layout layout(Pass pass, int pd, int pe) {
  Layout L{};
  L.ldd = pd + kPadBf16, L.lde = pe + kPadBf16;
  const size_t rows_d = round128(sizeof(bf16) * kTile * L.ldd), rows_e = round128(sizeof(bf16) * kTile * L.lde);
  const size_t vec = round128(sizeof(float) * kTile);
  size_t at = 0;
  L.q = at, at += rows_d;
  L.k = at, at += rows_d;
  L.v = at, at += rows_e;
  L.key_ok = at, at += vec;
  if (pass == Pass::forward) {  // K, V and key flags again, at one offset from the first (L.k .. at)
    const size_t second = at - L.k;
    L.k2 = L.k + second, L.v2 = L.v + second, L.key_ok2 = L.key_ok + second;
    at += second;
  } else {
    L.dout = at, at += rows_e;
    if (pass == Pass::dkdv) L.lse = at, at += vec, L.delta = at, at += vec;
  }
  L.bytes = at + mma::kSharedSlack;  // the kernels align the start (mma::align_shared)
  return L;
}

// dst (kTile x ld) <- rows [row0, row0 + kTile) of src (rows x width, row-major), zeros past the
// last row and in columns [width, cols) (cols: the padded width). 16 bytes per thread when rows
// are 16-byte aligned (width a multiple of 8, src aligned), else one value at a time.
__device__ __forceinline__ void load_rows(bf16* dst, int ld, int cols, const bf16* src, int64_t row0, int64_t rows,
                                          int width) {
  if (width % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int octs = cols / 8;
    for (int idx = threadIdx.x; idx < kTile * octs; idx += blockDim.x) {
      const int i = idx / octs, c = 8 * (idx % octs);
      const int64_t row = row0 + i;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (row < rows && c < width) x = *reinterpret_cast<const uint4*>(src + row * width + c);
      *reinterpret_cast<uint4*>(dst + i * ld + c) = x;
    }
    return;
  }
  const bf16 zero = mma::to_bf16(0.0f);
  for (int idx = threadIdx.x; idx < kTile * cols; idx += blockDim.x) {
    const int i = idx / cols, c = idx % cols;
    const int64_t row = row0 + i;
    dst[i * ld + c] = (row < rows && c < width) ? src[row * width + c] : zero;
  }
}

// A pass's shared buffers, placed by its layout (the parts it lacks point past its own).
struct Buffers {
  bf16 *q, *k, *v, *dout;
  float *key_ok, *lse, *delta;
};
__device__ __forceinline__ Buffers buffers(unsigned char* smem, const Layout& L) {
  return {reinterpret_cast<bf16*>(smem + L.q),        reinterpret_cast<bf16*>(smem + L.k),
          reinterpret_cast<bf16*>(smem + L.v),        reinterpret_cast<bf16*>(smem + L.dout),
          reinterpret_cast<float*>(smem + L.key_ok), reinterpret_cast<float*>(smem + L.lse),
          reinterpret_cast<float*>(smem + L.delta)};
}

// load_rows with cp.async (kernels/cuda/async_copy.cuh) where rows are 16-byte aligned: the
// copies are in flight until the caller's async::wait, so the next tile loads while this one
// computes. Other widths load synchronously, as load_rows.
__device__ __forceinline__ void load_rows_async(bf16* dst, int ld, int cols, const bf16* src, int64_t row0,
                                                int64_t rows, int width) {
  if (width % 8 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0) return load_rows(dst, ld, cols, src, row0, rows, width);
  const int octs = cols / 8;
  for (int idx = threadIdx.x; idx < kTile * octs; idx += blockDim.x) {
    const int i = idx / octs, c = 8 * (idx % octs);
    const int64_t row = row0 + i;
    const bool ok = row < rows && c < width;
    async::copy16_or_zero(dst + i * ld + c, ok ? src + row * width + c : src, ok);
  }
}

// ok[t] = 1 where key j0 + t exists and is not padded, else 0.
__device__ __forceinline__ void load_key_ok(float* ok, const Shape& sh, const float* pad, int64_t j0) {
  for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
    const int64_t j = j0 + t;
    ok[t] = j < sh.n_k && !(pad && pad[j] != 0.0f) ? 1.0f : 0.0f;
  }
}

// The backward's tiles of slice bh (rows zero-padded as load_rows does): a key tile's k, v rows
// and flags; a query tile's q, dO rows; and, for dK, dV, also its queries' lse and D (+inf and 0
// past n_q, so that P = 0 there).
__device__ __forceinline__ void load_key_tile(const Buffers& B, const Layout& L, const Shape& sh, int64_t bh,
                                              const bf16* k, const bf16* v, const float* pad, int64_t j0) {
  load_rows(B.k, L.ldd, sh.pd, k + bh * sh.n_k * sh.d, j0, sh.n_k, sh.d);
  load_rows(B.v, L.lde, sh.pe, v + bh * sh.n_k * sh.e, j0, sh.n_k, sh.e);
  load_key_ok(B.key_ok, sh, pad, j0);
}
__device__ __forceinline__ void load_query_rows(const Buffers& B, const Layout& L, const Shape& sh, int64_t bh,
                                                const bf16* q, const bf16* dout, int64_t i0) {
  load_rows(B.q, L.ldd, sh.pd, q + bh * sh.n_q * sh.d, i0, sh.n_q, sh.d);
  load_rows(B.dout, L.lde, sh.pe, dout + bh * sh.n_q * sh.e, i0, sh.n_q, sh.e);
}
__device__ __forceinline__ void load_query_tile(const Buffers& B, const Layout& L, const Shape& sh, int64_t bh,
                                                const bf16* q, const bf16* dout, const float* lse, const float* dvec,
                                                int64_t i0) {
  load_query_rows(B, L, sh, bh, q, dout, i0);
  for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
    const int64_t i = i0 + t;
    B.lse[t] = i < sh.n_q ? lse[bh * sh.n_q + i] : INFINITY;
    B.delta[t] = i < sh.n_q ? dvec[bh * sh.n_q + i] : 0.0f;
  }
}

// Whether query i sees key j under the causal mask and the window (padding and keys past n_k
// aside: the callers' key_ok flags hold those).
__device__ __forceinline__ bool sees(const Shape& sh, int64_t i, int64_t j) {
  return j - i >= sh.band.lo && j - i <= sh.band.hi;
}

// Whether the causal mask and the window hide every pair of the 16 queries from i and the 16
// keys from j: every offset j' - i' of the tile, from j - (i + 15) to j + 15 - i, is outside the band.
__device__ __forceinline__ bool hidden(const Shape& sh, int64_t i, int64_t j) {
  return j + kT - 1 - i < sh.band.lo || j - (i + kT - 1) > sh.band.hi;
}

// The keys a query tile [i0, i0 + kTile) reads, from a multiple of kTile.
__device__ __forceinline__ KeyRange key_span(const Shape& sh, int64_t i0) {
  const KeyRange keys = keys_of_block(i0, kTile, sh.n_q, sh.n_k, sh.causal != 0, sh.window);
  return {keys.begin / kTile * kTile, keys.end};
}

// The online softmax's combination of a lane quad's values for its rows (g and g + 8 of the
// warp's 16: each quad holds two rows, four lanes each).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(device::kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(device::kFullMask, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(device::kFullMask, v, 1);
  return v + __shfl_xor_sync(device::kFullMask, v, 2);
}

// q: (B,H,Nq,d) k: (B,H,Nk,d) v: (B,H,Nk,e) -> out (B,H,Nq,e) bf16, lse (B,H,Nq) f32.
// Register-resident (kernels/cuda/warp_mma.cuh): the warp's 16 x 64 scores S, its
// probabilities P and its output O stay in mma.sync accumulators; each lane holds rows g and
// g + 8 of its warp's 16 (g = lane / 4) and reduces them over its lane quad. kDim (32, 64, 128)
// covers the padded widths pd and pe.
template <int kDim>
__global__ void __launch_bounds__(kThreads)
    softmax_attention_bf16_forward_kernel(Shape sh, const bf16* q, const bf16* k, const bf16* v, bf16* out,
                                          float* lse) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  const Layout L = layout(Pass::forward, sh.pd, sh.pe);
  bf16* qs = reinterpret_cast<bf16*>(smem + L.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + L.k);  // (the current tile's buffers, below)
  bf16* vs = reinterpret_cast<bf16*>(smem + L.v);
  float* key_ok = reinterpret_cast<float*>(smem + L.key_ok);
  const int warp = threadIdx.x / device::kWarp, lane = threadIdx.x % device::kWarp;
  const int wr = warp * kT;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t i0 = (sh.tiles - 1 - static_cast<int64_t>(blockIdx.x) / sh.slices) * kTile;
  const int64_t row0 = i0 + wr + wm::c_row(lane, 0), row1 = row0 + 8;  // this lane's two queries
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  load_rows(qs, L.ldd, sh.pd, q + bh * sh.n_q * sh.d, i0, sh.n_q, sh.d);
  __syncthreads();
  wm::FragA qa[kDim / kT];
#pragma unroll
  for (int t = 0; t < kDim / kT; ++t)
    if (t * kT < sh.pd) wm::load_a(qa[t], qs, L.ldd, wr, t * kT);
  wm::FragC o[kDim / 8];
#pragma unroll
  for (int t = 0; t < kDim / 8; ++t) wm::zero(o[t]);

  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const KeyRange span = key_span(sh, i0);
  // Two buffers of K, V and key flags: tile t + 1 is in flight (cp.async) while tile t computes.
  // Buffer b's parts start at these offsets from the first's (L.k2 - L.k = L.v2 - L.v, and so
  // on, as layout() places them), so one offset selects a buffer.
  const size_t second = L.k2 - L.k;
  const bf16* kb = k + bh * sh.n_k * sh.d;
  const bf16* vb = v + bh * sh.n_k * sh.e;
  if (span.begin < span.end) {
    load_rows_async(ks, L.ldd, sh.pd, kb, span.begin, sh.n_k, sh.d);
    load_rows_async(vs, L.lde, sh.pe, vb, span.begin, sh.n_k, sh.e);
    load_key_ok(key_ok, sh, pad, span.begin);
    async::commit();
  }
  for (int64_t j0 = span.begin, t = 0; j0 < span.end; j0 += kTile, ++t) {
    const size_t here = (t % 2) * second, next = second - here;
    // The other buffer was last read in the step before, which ended in a barrier: refill it.
    if (j0 + kTile < span.end) {
      load_rows_async(reinterpret_cast<bf16*>(smem + L.k + next), L.ldd, sh.pd, kb, j0 + kTile, sh.n_k, sh.d);
      load_rows_async(reinterpret_cast<bf16*>(smem + L.v + next), L.lde, sh.pe, vb, j0 + kTile, sh.n_k, sh.e);
      load_key_ok(reinterpret_cast<float*>(smem + L.key_ok + next), sh, pad, j0 + kTile);
    }
    async::commit();  // (empty after the last tile: wait<1> always means "all but the next tile")
    async::wait<1>();
    __syncthreads();  // every thread's copies of tile t are complete and visible
    ks = reinterpret_cast<bf16*>(smem + L.k + here);
    vs = reinterpret_cast<bf16*>(smem + L.v + here);
    key_ok = reinterpret_cast<float*>(smem + L.key_ok + here);
    wm::FragC s[2 * kTiles];  // 16 x 64: columns 8 t .. 8 t + 7 in s[t]
#pragma unroll
    for (int t = 0; t < 2 * kTiles; ++t) wm::zero(s[t]);
#pragma unroll
    for (int pp = 0; pp < kTiles; ++pp) {
      if (hidden(sh, i0 + wr, j0 + pp * kT)) continue;
#pragma unroll
      for (int t = 0; t < kDim / kT; ++t) {
        if (t * kT >= sh.pd) continue;
        wm::FragB b[2];
        wm::load_b_n_major(b, ks, L.ldd, pp * kT, t * kT);
        wm::mma(s[2 * pp], qa[t], b[0]);
        wm::mma(s[2 * pp + 1], qa[t], b[1]);
      }
    }
    // Online softmax: rescale what was accumulated under the old max. While a row has seen
    // nothing (m_new = -inf) any finite shift gives p = 0, alpha = 0 and keeps l = O = 0.
    float tile0 = -INFINITY, tile1 = -INFINITY;
#pragma unroll
    for (int t = 0; t < 2 * kTiles; ++t)
#pragma unroll
      for (int el = 0; el < 4; ++el) {
        const int c = 8 * t + wm::c_col(lane, el);
        const bool seen = key_ok[c] != 0.0f && sees(sh, el < 2 ? row0 : row1, j0 + c);
        const float x = seen ? s[t].r[el] * sh.scale : -INFINITY;
        s[t].r[el] = x;
        if (el < 2)
          tile0 = fmaxf(tile0, x);
        else
          tile1 = fmaxf(tile1, x);
      }
    const float new0 = fmaxf(m0, quad_max(tile0)), new1 = fmaxf(m1, quad_max(tile1));
    const float shift0 = new0 == -INFINITY ? 0.0f : new0, shift1 = new1 == -INFINITY ? 0.0f : new1;
    const float alpha0 = expf(m0 - shift0), alpha1 = expf(m1 - shift1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int t = 0; t < 2 * kTiles; ++t)
#pragma unroll
      for (int el = 0; el < 4; ++el) {
        // The weights P V multiplies, rounded as it rounds them: out stays their weighted mean.
        const float p = mma::to_float(mma::to_bf16(expf(s[t].r[el] - (el < 2 ? shift0 : shift1))));
        s[t].r[el] = p;
        if (el < 2)
          sum0 += p;
        else
          sum1 += p;
      }
    l0 = l0 * alpha0 + quad_sum(sum0), l1 = l1 * alpha1 + quad_sum(sum1);
    m0 = new0, m1 = new1;
#pragma unroll
    for (int t = 0; t < kDim / 8; ++t) o[t].r[0] *= alpha0, o[t].r[1] *= alpha0, o[t].r[2] *= alpha1, o[t].r[3] *= alpha1;
#pragma unroll
    for (int pp = 0; pp < kTiles; ++pp) {  // O += P V
      if (hidden(sh, i0 + wr, j0 + pp * kT)) continue;
      const wm::FragA pa = wm::accumulator_to_a(s[2 * pp], s[2 * pp + 1]);
#pragma unroll
      for (int t = 0; t < kDim / kT; ++t) {
        if (t * kT >= sh.pe) continue;
        wm::FragB b[2];
        wm::load_b_k_major(b, vs, L.lde, pp * kT, t * kT);
        wm::mma(o[2 * t], pa, b[0]);
        wm::mma(o[2 * t + 1], pa, b[1]);
      }
    }
    __syncthreads();  // every warp is done with K, V before the next tile overwrites them
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = h == 0 ? row0 : row1;
    const float l = h == 0 ? l0 : l1, m = h == 0 ? m0 : m1;
    if (i >= sh.n_q) continue;
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    bf16* dst = out + (bh * sh.n_q + i) * sh.e;
#pragma unroll
    for (int t = 0; t < kDim / 8; ++t) {
      const int c = 8 * t + wm::c_col(lane, 0);
      if (c < sh.e) dst[c] = mma::to_bf16(o[t].r[2 * h] * inv);
      if (c + 1 < sh.e) dst[c + 1] = mma::to_bf16(o[t].r[2 * h + 1] * inv);
    }
    if (lane % 4 == 0) lse[bh * sh.n_q + i] = l == 0.0f ? INFINITY : m + logf(l);
  }
}

// dvec (rows) = rowsum(dout o out) in f32, dout, out: (rows, e) bf16; one warp per row.
__global__ void softmax_attention_bf16_delta_kernel(const bf16* dout, const bf16* out, float* dvec, int64_t rows,
                                                    int e) {
  const int lane = threadIdx.x % device::kWarp;
  const int64_t warp = device::global_index() / device::kWarp;
  const int64_t warps = device::global_stride() / device::kWarp;
  for (int64_t i = warp; i < rows; i += warps) {
    float dot = 0.0f;
    for (int c = lane; c < e; c += device::kWarp) dot += mma::to_float(dout[i * e + c]) * mma::to_float(out[i * e + c]);
    dot = device::warp_reduce(dot, device::Sum());
    if (lane == 0) dvec[i] = dot;
  }
}

// The backward (kernels/cuda/warp_mma.cuh): S, dP, P and dS as mma.sync accumulators, P and dS
// the A operands of the gradient products straight from registers. A warp's score tile is its 16
// rows by the 64 of the other side, taken kPairs 16-column pairs at a time (pair p: columns
// 16 p .. 16 p + 15, in out[2 p] and out[2 p + 1]).
//
// out = rows a0 .. a0 + 15 of `a` times rows 16 p0 .. 16 (p0 + kPairs) - 1 of `b`, transposed
// (both bf16 row-major in shared memory, depth `depth`), on the pairs `skip` does not hide.
template <int kDim, int kPairs, typename Skip>
__device__ __forceinline__ void scores_registers(wm::FragC (&out)[2 * kPairs], const bf16* a, const bf16* b, int ld,
                                                 int depth, int a0, int p0, Skip skip) {
#pragma unroll
  for (int t = 0; t < 2 * kPairs; ++t) wm::zero(out[t]);
#pragma unroll
  for (int kk = 0; kk < kDim / kT; ++kk) {
    if (kk * kT >= depth) continue;
    wm::FragA fa;
    wm::load_a(fa, a, ld, a0, kk * kT);
#pragma unroll
    for (int pp = 0; pp < kPairs; ++pp) {
      if (skip(p0 + pp)) continue;
      wm::FragB b2[2];
      wm::load_b_n_major(b2, b, ld, (p0 + pp) * kT, kk * kT);
      wm::mma(out[2 * pp], fa, b2[0]);
      wm::mma(out[2 * pp + 1], fa, b2[1]);
    }
  }
}

// acc (16 x kDim) += x m, with x the pairs p0 .. p0 + kPairs - 1 of a score tile (accumulators
// rounded to bf16) and m's rows 16 p0 .. k-major in shared memory with `width` columns. Pair by
// pair in order: a pass over all 64 columns and passes over parts of them add the same terms in
// the same order.
template <int kDim, int kPairs, typename Skip>
__device__ __forceinline__ void times_rows(wm::FragC (&acc)[kDim / 8], const wm::FragC (&x)[2 * kPairs], const bf16* m,
                                           int ld, int width, int p0, Skip skip) {
#pragma unroll
  for (int pp = 0; pp < kPairs; ++pp) {
    if (skip(p0 + pp)) continue;
    const wm::FragA fa = wm::accumulator_to_a(x[2 * pp], x[2 * pp + 1]);
#pragma unroll
    for (int t = 0; t < kDim / kT; ++t) {
      if (t * kT >= width) continue;
      wm::FragB b2[2];
      wm::load_b_k_major(b2, m, ld, (p0 + pp) * kT, t * kT);
      wm::mma(acc[2 * t], fa, b2[0]);
      wm::mma(acc[2 * t + 1], fa, b2[1]);
    }
  }
}

// The warp's accumulators (its 16 rows from row0) as bf16 rows of dst (rows x width).
template <int kDim>
__device__ __forceinline__ void store_registers(bf16* dst, int64_t rows, int width, int64_t row0,
                                                const wm::FragC (&acc)[kDim / 8]) {
  const int lane = threadIdx.x % device::kWarp;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = row0 + wm::c_row(lane, 2 * h);
    if (r >= rows) continue;
#pragma unroll
    for (int t = 0; t < kDim / 8; ++t) {
      const int c = 8 * t + wm::c_col(lane, 0);
      if (c < width) dst[r * width + c] = mma::to_bf16(acc[t].r[2 * h]);
      if (c + 1 < width) dst[r * width + c + 1] = mma::to_bf16(acc[t].r[2 * h + 1]);
    }
  }
}

// Query pairs per pass of the dK, dV kernel: all four up to kDim = 64; at 128, where dK and dV
// hold 128 accumulators a lane, one (S^T and dP^T of 16 x 16: 16 registers instead of 64; two
// pairs, 32 registers, still spill at sm_90).
__host__ __device__ constexpr int dkdv_pairs(int dim) { return dim > 64 ? kTiles / 4 : kTiles; }

// dk: (B,H,Nk,d), dv: (B,H,Nk,e), either may be null. grid: slices * key tiles, the first first
// (under causal masking the most queries see them). Warp w holds keys j0 + 16 w .. and their dK,
// dV in kDim / 8 accumulator fragments each (kDim covers the padded d and e).
template <int kDim>
__global__ void __launch_bounds__(kThreads)
    softmax_attention_bf16_dkdv_kernel(Shape sh, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                       const float* lse, const float* dvec, bf16* dk, bf16* dv) {
  constexpr int kPairs = dkdv_pairs(kDim);
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  const Layout L = layout(Pass::dkdv, sh.pd, sh.pe);
  const Buffers B = buffers(smem, L);
  bf16 *qs = B.q, *ks = B.k, *vs = B.v, *dos = B.dout;
  float *key_ok = B.key_ok, *lse_s = B.lse, *d_s = B.delta;
  const int warp = threadIdx.x / device::kWarp, lane = threadIdx.x % device::kWarp;
  const int wr = warp * kT;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) / sh.slices * kTile;
  const int64_t key0 = j0 + wr + wm::c_row(lane, 0), key1 = key0 + 8;  // this lane's two keys
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  load_key_tile(B, L, sh, bh, k, v, pad, j0);

  wm::FragC dk_acc[kDim / 8], dv_acc[kDim / 8];
#pragma unroll
  for (int t = 0; t < kDim / 8; ++t) wm::zero(dk_acc[t]), wm::zero(dv_acc[t]);
  // Only the query tiles that see some key of this tile (causal: none before j0; window).
  const KeyRange queries = queries_of_block(j0, kTile, sh.n_q, sh.n_k, sh.causal != 0, sh.window);
  for (int64_t i0 = queries.begin / kTile * kTile; i0 < queries.end; i0 += kTile) {
    load_query_tile(B, L, sh, bh, q, dout, lse, dvec, i0);
    __syncthreads();
    const auto skip = [&](int pp) { return hidden(sh, i0 + pp * kT, j0 + wr); };
    // Query pairs p0 .. p0 + kPairs - 1 of the tile.
    const auto pass = [&](int p0) {
      wm::FragC st[2 * kPairs], dpt[2 * kPairs];  // S^T and dP^T: the warp's keys x 16 kPairs queries
      scores_registers<kDim, kPairs>(st, ks, qs, L.ldd, sh.pd, wr, p0, skip);
      scores_registers<kDim, kPairs>(dpt, vs, dos, L.lde, sh.pe, wr, p0, skip);
      const bool seen0 = key_ok[wr + wm::c_row(lane, 0)] != 0.0f, seen1 = key_ok[wr + wm::c_row(lane, 2)] != 0.0f;
#pragma unroll
      for (int t = 0; t < 2 * kPairs; ++t)
#pragma unroll
        for (int el = 0; el < 4; ++el) {
          const int c = kT * p0 + 8 * t + wm::c_col(lane, el);
          const int64_t i = i0 + c;
          // P = exp(S - lse): 0 where invisible or where the query sees no key (lse = +inf).
          const bool seen = (el < 2 ? seen0 : seen1) && i < sh.n_q && sees(sh, i, el < 2 ? key0 : key1);
          const float p = seen ? expf(st[t].r[el] * sh.scale - lse_s[c]) : 0.0f;
          dpt[t].r[el] = seen ? p * (dpt[t].r[el] - d_s[c]) * sh.scale : 0.0f;  // dS^T
          st[t].r[el] = p;
        }
      times_rows<kDim, kPairs>(dv_acc, st, dos, L.lde, sh.pe, p0, skip);  // dV += P^T dO
      times_rows<kDim, kPairs>(dk_acc, dpt, qs, L.ldd, sh.pd, p0, skip);  // dK += dS^T Q
    };
    if constexpr (kPairs == kTiles) {
      pass(0);
    } else {
#pragma unroll 1
      for (int p0 = 0; p0 < kTiles; p0 += kPairs) pass(p0);
    }
    __syncthreads();
  }
  if (dk) store_registers<kDim>(dk + bh * sh.n_k * sh.d, sh.n_k, sh.d, j0 + wr, dk_acc);
  if (dv) store_registers<kDim>(dv + bh * sh.n_k * sh.e, sh.n_k, sh.e, j0 + wr, dv_acc);
}

// dq: (B,H,Nq,d). grid: slices * query tiles, the last first. Warp w holds queries i0 + 16 w ..
// and their dQ in kDim / 8 fragments (64 registers at kDim = 128: S and dP of all 64 keys fit
// beside them).
template <int kDim>
__global__ void __launch_bounds__(kThreads)
    softmax_attention_bf16_dq_kernel(Shape sh, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                     const float* lse, const float* dvec, bf16* dq) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  unsigned char* smem = mma::align_shared(smem_unaligned);
  const Layout L = layout(Pass::dq, sh.pd, sh.pe);
  const Buffers B = buffers(smem, L);
  bf16 *qs = B.q, *ks = B.k, *vs = B.v, *dos = B.dout;
  float* key_ok = B.key_ok;
  const int warp = threadIdx.x / device::kWarp, lane = threadIdx.x % device::kWarp;
  const int wr = warp * kT;
  const int64_t bh = blockIdx.x % sh.slices;
  const int64_t i0 = (sh.tiles - 1 - static_cast<int64_t>(blockIdx.x) / sh.slices) * kTile;
  const int64_t row0 = i0 + wr + wm::c_row(lane, 0), row1 = row0 + 8;  // this lane's two queries
  const float* pad = sh.pad ? sh.pad + (bh / sh.heads) * sh.n_k : nullptr;
  load_query_rows(B, L, sh, bh, q, dout, i0);
  const float lse0 = row0 < sh.n_q ? lse[bh * sh.n_q + row0] : INFINITY;
  const float lse1 = row1 < sh.n_q ? lse[bh * sh.n_q + row1] : INFINITY;
  const float d0 = row0 < sh.n_q ? dvec[bh * sh.n_q + row0] : 0.0f;
  const float d1 = row1 < sh.n_q ? dvec[bh * sh.n_q + row1] : 0.0f;

  wm::FragC dq_acc[kDim / 8];
#pragma unroll
  for (int t = 0; t < kDim / 8; ++t) wm::zero(dq_acc[t]);
  const KeyRange span = key_span(sh, i0);
  for (int64_t j0 = span.begin; j0 < span.end; j0 += kTile) {
    load_key_tile(B, L, sh, bh, k, v, pad, j0);
    __syncthreads();
    const auto skip = [&](int pp) { return hidden(sh, i0 + wr, j0 + pp * kT); };
    wm::FragC s[2 * kTiles], dp[2 * kTiles];
    scores_registers<kDim, kTiles>(s, qs, ks, L.ldd, sh.pd, wr, 0, skip);
    scores_registers<kDim, kTiles>(dp, dos, vs, L.lde, sh.pe, wr, 0, skip);
#pragma unroll
    for (int t = 0; t < 2 * kTiles; ++t)
#pragma unroll
      for (int el = 0; el < 4; ++el) {
        const int c = 8 * t + wm::c_col(lane, el);
        const int64_t i = el < 2 ? row0 : row1;
        const bool seen = key_ok[c] != 0.0f && i < sh.n_q && sees(sh, i, j0 + c);
        const float p = seen ? expf(s[t].r[el] * sh.scale - (el < 2 ? lse0 : lse1)) : 0.0f;
        dp[t].r[el] = seen ? p * (dp[t].r[el] - (el < 2 ? d0 : d1)) * sh.scale : 0.0f;  // dS
      }
    times_rows<kDim, kTiles>(dq_acc, dp, ks, L.ldd, sh.pd, 0, skip);  // dQ += dS K
    __syncthreads();
  }
  store_registers<kDim>(dq + bh * sh.n_q * sh.d, sh.n_q, sh.d, i0 + wr, dq_acc);
}
void check_args(const char* op, const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg) {
  TARN_ASSERT(dims.batch >= 0 && dims.heads >= 0 && dims.n_q >= 0 && dims.n_k >= 0, op,
              ": negative extent in (B=", dims.batch, ", H=", dims.heads, ", Nq=", dims.n_q, ", Nk=", dims.n_k, ")");
  TARN_ASSERT(dims.d > 0 && dims.e > 0 && dims.d <= kMaxDim && dims.e <= kMaxDim, op, ": head dim d=", dims.d,
              " and value dim e=", dims.e, " must be in [1, ", kMaxDim, "] for the bf16 kernels");
  TARN_ASSERT(!cfg.causal || dims.n_q == dims.n_k, op, ": causal attention needs Nq == Nk, got Nq=", dims.n_q,
              " Nk=", dims.n_k);
  TARN_ASSERT(cfg.window >= 0, op, ": window must be >= 0, got ", cfg.window);
}

int round16(int64_t n) { return static_cast<int>((n + kT - 1) / kT * kT); }

Shape make_shape(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg, int64_t rows) {
  Shape sh{};
  sh.slices = dims.batch * dims.heads, sh.heads = dims.heads, sh.n_q = dims.n_q, sh.n_k = dims.n_k;
  sh.d = static_cast<int>(dims.d), sh.e = static_cast<int>(dims.e);
  sh.pd = round16(dims.d), sh.pe = round16(dims.e);
  sh.scale = cfg.scale != 0.0f ? cfg.scale : 1.0f / std::sqrt(static_cast<float>(dims.d));
  sh.causal = cfg.causal ? 1 : 0;
  sh.window = cfg.window;
  sh.band = cpu::visible_offsets(cfg.causal, cfg.window);
  sh.pad = cfg.key_padding_mask;
  sh.tiles = (rows + kTile - 1) / kTile;
  return sh;
}

// One block per (slice, tile), `pass`'s shared memory (opting in above the default).
template <typename... P, typename... A>
void launch_tiles(const char* op, Pass pass, void (*kernel)(P...), const Shape& sh, A&&... args) {
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  const int64_t blocks = sh.slices * sh.tiles;
  TARN_ASSERT(blocks <= kMaxGridX, op, ": ", sh.slices, " (batch, head) pairs x ", sh.tiles, " tiles exceed one grid");
  const size_t smem = layout(pass, sh.pd, sh.pe).bytes;
  if (smem > kDefaultSmem) {
    TARN_ASSERT(smem <= static_cast<size_t>(device::max_dynamic_smem()), op, ": d=", sh.d, ", e=", sh.e, " need ",
                smem, " bytes of shared memory, more than the device grants a block");
    TARN_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  tarn::launch(kernel, static_cast<unsigned>(blocks), kThreads, smem, nullptr, sh, std::forward<A>(args)...);
}

// The fragments' width kDim (32, 64 or 128) that covers the padded d and e.
int kernel_dim(const Shape& sh) {
  const int t = (sh.pd > sh.pe ? sh.pd : sh.pe) / kT;
  return t <= 2 ? 32 : t <= 4 ? 64 : 128;
}

template <int kDim>
void backward_with(const Shape& key_tiles, const Shape& query_tiles, const bf16* q, const bf16* k, const bf16* v,
                   const bf16* dout, const float* lse, const float* dvec, bf16* dq, bf16* dk, bf16* dv) {
  const char* op = "softmax_attention_bf16_backward";
  if ((dk || dv) && key_tiles.n_k > 0)
    launch_tiles(op, Pass::dkdv, softmax_attention_bf16_dkdv_kernel<kDim>, key_tiles, q, k, v, dout, lse, dvec, dk,
                 dv);
  if (dq && query_tiles.n_q > 0)
    launch_tiles(op, Pass::dq, softmax_attention_bf16_dq_kernel<kDim>, query_tiles, q, k, v, dout, lse, dvec, dq);
}
}  // namespace

size_t softmax_attention_bf16_forward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                       const SoftmaxAttentionConfig& cfg) {
  check_args("softmax_attention_bf16_forward", dims, cfg);
  return 0;
}

void softmax_attention_bf16_forward(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg,
                                    const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,
                                    ::tarn::bf16* out, float* lse, float* workspace, size_t workspace_floats) {
  const char* op = "softmax_attention_bf16_forward";
  check_args(op, dims, cfg);
  (void)workspace, (void)workspace_floats;
  const Shape sh = make_shape(dims, cfg, dims.n_q);
  if (sh.slices == 0 || dims.n_q == 0) return;
  const auto kernel = kernel_dim(sh) == 32   ? softmax_attention_bf16_forward_kernel<32>
                      : kernel_dim(sh) == 64 ? softmax_attention_bf16_forward_kernel<64>
                                             : softmax_attention_bf16_forward_kernel<128>;
  launch_tiles(op, Pass::forward, kernel, sh, device_bf16(q), device_bf16(k), device_bf16(v), device_bf16(out), lse);
}

size_t softmax_attention_bf16_backward_workspace_floats(const SoftmaxAttentionDims& dims,
                                                        const SoftmaxAttentionConfig& cfg) {
  check_args("softmax_attention_bf16_backward", dims, cfg);
  return static_cast<size_t>(dims.batch * dims.heads * dims.n_q);
}

void softmax_attention_bf16_backward(const SoftmaxAttentionDims& dims, const SoftmaxAttentionConfig& cfg,
                                     const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,
                                     const ::tarn::bf16* out, const float* lse, const ::tarn::bf16* dout,
                                     ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* workspace,
                                     size_t workspace_floats) {
  const char* op = "softmax_attention_bf16_backward";
  check_args(op, dims, cfg);
  if (!dq && !dk && !dv) return;
  const size_t need = TARN_CUDA_NS::softmax_attention_bf16_backward_workspace_floats(dims, cfg);
  TARN_ASSERT(need == 0 || (workspace && workspace_floats >= need), op, ": workspace of ", workspace_floats,
              " floats is smaller than the ", need, " it needs");
  const int64_t slices = dims.batch * dims.heads, rows = slices * dims.n_q;
  if (slices == 0) return;
  if (rows > 0)
    tarn::launch(softmax_attention_bf16_delta_kernel, device::grid_for(rows * device::kWarp), device::kBlock, 0,
                 nullptr, device_bf16(dout), device_bf16(out), workspace, rows, static_cast<int>(dims.e));
  const Shape key_tiles = make_shape(dims, cfg, dims.n_k), query_tiles = make_shape(dims, cfg, dims.n_q);
  const bf16 *q16 = device_bf16(q), *k16 = device_bf16(k), *v16 = device_bf16(v), *do16 = device_bf16(dout);
  bf16 *dq16 = device_bf16(dq), *dk16 = device_bf16(dk), *dv16 = device_bf16(dv);  // null stays null
  switch (kernel_dim(key_tiles)) {
    case 32: backward_with<32>(key_tiles, query_tiles, q16, k16, v16, do16, lse, workspace, dq16, dk16, dv16); break;
    case 64: backward_with<64>(key_tiles, query_tiles, q16, k16, v16, do16, lse, workspace, dq16, dk16, dv16); break;
    default: backward_with<128>(key_tiles, query_tiles, q16, k16, v16, do16, lse, workspace, dq16, dk16, dv16); break;
  }
}

}  // namespace tarn::kernels::TARN_CUDA_NS
