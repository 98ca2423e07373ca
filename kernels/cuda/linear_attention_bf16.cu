// bf16 linear attention on CUDA (kernels/cuda_linear_attention_bf16.h), the chunk products on
// tensor cores through kernels/cuda/mma.cuh. The same pass structure as the f32 kernels of
// linear_attention.cu: every pass is one chunked scan
//   O_i = X_i S + sum_{j in the chunk, j <= i (forward) or j >= i (reverse)} (X_i . Y_j) W_j
//   S   = sum over the chunks already scanned of Y_j^T W_j              (p x tile, f32)
// or, for bidirectional and cross attention, S = Y^T W over all rows first and then O = X S:
//   forward  X = phi(q), Y = phi(k), W = V' = [v | 1]  -> U = [num | den] (f32 workspace)
//   dA       X = G,      Y = V',     W = phi(k)        forward scan, dq = phi'(q) o dA
//   dB       X = V',     Y = G,      W = phi(q)        reverse scan, dk = phi'(k) o dB
//   dV       X = phi(k), Y = phi(q), W = G[:, :e]      reverse scan
// with G = [dO / (den + eps) | -(dO . out) / (den + eps)] (f32 workspace) and padded keys as
// zero rows of phi(k). The exp map exp(x - max x) needs whole rows: a pass first writes each
// raw row's max, which the loads subtract, and its backward goes through an f32 dA (dB) in the
// workspace and a row pass (linear_attention_bf16_exp_backward_kernel). Each operand is loaded
// into shared memory as bf16, zero-padded to a
// multiple of 16 columns (the ones column of V' and the normaliser column of G are just one
// more column) and to whole chunks of rows. One block (4 warps) per (batch*head, tile of
// kTileQ output columns); per chunk, in barrier-separated phases:
//   A  load X, Y, W chunk tiles (feature map fused)
//   B  P = X Y^T on the 16x16 tiles the causal mask keeps (f32 to shared), O = X S in registers
//   C  P masked elementwise and rounded to bf16
//   D  O += P W, O to shared; S += Y^T W (f32 in shared memory, tensor cores accumulating onto
//      it), then S rounded to bf16 for the next chunk's X S
//   E  O rows written out (f32, or bf16 with phi' chained in and padded rows zeroed)
// Small B*H (fewer blocks than twice the SMs), or a test forcing it through
// linear_attention_set_sequence_split: the sequence is split into segments (grid z) as in the
// f32 kernels (linear_attention.cu, linear_attention_shared.cuh): pass 1 writes each segment's
// f32 state sum Y^T W, pass 2 turns them into exclusive prefix (forward), suffix (reverse) or
// total (bidirectional) sums, pass 3 is the scan above started from its segment's state.
// The state never leaves shared memory and no per-chunk states are kept: the workspace is
// (B, H, Nq, e + 1) floats, plus segments * d * (e + 1) per (batch, head) when split (at most
// one segment per 2 chunks): linear in N. The state accumulates in f32 and is rounded to bf16
// only as an operand of X S, where X is bf16 already: its rounding adds an error of the size
// X's own adds (splitting S into a bf16 pair hi + lo, two products, was tried: for twice the
// X S work the conformance errors barely moved, the worst from 0.70 to 0.64 of its bound).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/feature_maps.cuh"
#include "kernels/cuda/linear_attention_chunked_bf16.cuh"
#include "kernels/cuda/linear_attention_shared.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda_linear_attention_bf16.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using cpu::FeatureMap;
using mma::bf16;

constexpr int kChunk = kCudaLinearAttentionBf16Chunk;  // rows per chunk
constexpr int kT = mma::kTile;                   // 16
constexpr int kChunkTiles = kChunk / kT;         // 16-row tiles per chunk
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * device::kWarp;
constexpr int kMaxDim = 256;                     // largest d and e
constexpr int kPadBf16 = 8;  // extra elements per shared row (16 bytes): consecutive rows start
constexpr int kPadF32 = 4;   // in different banks, and ld stays a multiple of 16 bytes (wmma)
// Automatic sequence splitting (linear_attention_shared.cuh): at least this many chunks per
// segment (128 rows, as the f32 kernels' 4 chunks of 32).
constexpr int64_t kMinChunksPerSegment = 2;

// The public bf16 storage type as the device's bf16 (the same 16 bits).
inline const bf16* device_bf16(const ::tarn::bf16* p) { return reinterpret_cast<const bf16*>(p); }
inline bf16* device_bf16(::tarn::bf16* p) { return reinterpret_cast<bf16*>(p); }

inline int round16(int n) { return (n + kT - 1) / kT * kT; }

// A (B, H, rows, ld) row-major source read as (rows, cols [+ a ones column]): bf16 (with the
// feature map applied) or f32; rows where pad (batch, rows) is nonzero read as zeros, and so do
// rows and columns past the end (the zero padding of tiles).
struct Operand {
  const bf16* h;      // bf16 source, or null
  const float* f;     // f32 source when h is null
  int64_t rows;
  int cols;           // source columns read
  int ld;             // source row stride
  int ones;           // 1: column `cols` is all ones (V' = [V | 1])
  const float* pad;   // (batch, rows) key padding flags, or null
  FeatureMap fm;      // applied to bf16 source values
  const float* row_max;  // (B, H, rows) max of each raw row, for the exp map; else null
};

// Rows [r0, r0 + kChunk) and columns [c0, c0 + w) of an operand, as bf16, into a (kChunk, ld)
// tile: a warp per row, its lanes on consecutive columns (coalesced), the row's padding flag
// read once.
__device__ __forceinline__ void load_tile(const Operand& o, int64_t bh, int64_t heads, int64_t r0, int c0, int w,
                                          bf16* tile, int ld) {
  const int lane = threadIdx.x % device::kWarp;
  for (int i = threadIdx.x / device::kWarp; i < kChunk; i += blockDim.x / device::kWarp) {
    const int64_t row = r0 + i;
    const bool zero_row = row >= o.rows || (o.pad && o.pad[(bh / heads) * o.rows + row] != 0.0f);
    const int64_t base = (bh * o.rows + row) * o.ld;  // read only when the row exists
    const float shift = o.row_max && !zero_row ? o.row_max[bh * o.rows + row] : 0.0f;
#pragma unroll 1  // unrolled, its 64-bit addresses push the scan kernel into spills
    for (int k = lane; k < w; k += device::kWarp) {
      const int col = c0 + k;
      float value = 0.0f;
      if (!zero_row && col < o.cols)
        value = o.h ? fmap::phi(o.fm, mma::to_float(o.h[base + col]), shift) : o.f[base + col];
      else if (!zero_row && o.ones && col == o.cols)
        value = 1.0f;
      tile[i * ld + k] = mma::to_bf16(value);
    }
  }
}

// Where a scan's output goes: (B, H, rows, cols) f32, or bf16 multiplied by phi'(chain) (the
// raw input of the same shape, an elementwise map) with padded rows zeroed.
struct Output {
  float* f;            // f32 destination, or null
  bf16* h;             // bf16 destination when f is null
  int64_t rows;
  int cols;
  const bf16* chain;   // raw q or k whose phi' multiplies the value, or null
  FeatureMap fm;
  const float* pad;    // (batch, rows): rows written as zeros, or null
};

// Rows [r0, r0 + kChunk) and columns [c0, c0 + w) of the output from a (kChunk, ld) f32 tile,
// a warp per row as load_tile.
__device__ __forceinline__ void write_tile(const Output& o, int64_t bh, int64_t heads, int64_t r0, int c0, int w,
                                           const float* tile, int ld) {
  const int lane = threadIdx.x % device::kWarp;
  const int wq = o.cols - c0 < w ? o.cols - c0 : w;
  for (int i = threadIdx.x / device::kWarp; i < kChunk; i += blockDim.x / device::kWarp) {
    const int64_t row = r0 + i;
    if (row >= o.rows) break;
    const bool zero_row = o.pad && o.pad[(bh / heads) * o.rows + row] != 0.0f;
    const int64_t base = (bh * o.rows + row) * o.cols + c0;
#pragma unroll 1  // as in load_tile
    for (int m = lane; m < wq; m += device::kWarp) {
      float value = zero_row ? 0.0f : tile[i * ld + m];
      if (o.chain) value *= fmap::dphi_elementwise(o.fm, mma::to_float(o.chain[base + m]));
      if (o.f)
        o.f[base + m] = value;
      else
        o.h[base + m] = mma::to_bf16(value);
    }
  }
}

// Byte offsets of the scan's shared memory for X, Y of width p (a multiple of 16) and a W tile
// of kTileQ columns. Each part starts on 128 bytes (wmma needs 32).
struct SmemLayout {
  int ldx, ldw, ldpf, ldpb, ldsf, ldsb;  // leading dimensions, in elements
  size_t xs, ys, ws, pf, pb, sf, sb, bytes;
};

__host__ __device__ __forceinline__ size_t round128(size_t b) { return (b + 127) / 128 * 128; }

template <int kTileQ>
__host__ __device__ __forceinline__ SmemLayout smem_layout(int p) {
  SmemLayout s;
  s.ldx = p + kPadBf16;
  s.ldw = kTileQ + kPadBf16;
  s.ldpf = kChunk + kPadF32;  // P, then the O tile (kTileQ <= kChunk columns)
  s.ldpb = kChunk + kPadBf16;
  s.ldsf = kTileQ + kPadF32;
  s.ldsb = kTileQ + kPadBf16;
  size_t at = 0;
  s.xs = at, at += round128(sizeof(bf16) * kChunk * s.ldx);    // X chunk
  s.ys = at, at += round128(sizeof(bf16) * kChunk * s.ldx);    // Y chunk
  s.ws = at, at += round128(sizeof(bf16) * kChunk * s.ldw);    // W chunk tile
  s.pf = at, at += round128(sizeof(float) * kChunk * s.ldpf);  // P (f32), then O
  s.pb = at, at += round128(sizeof(bf16) * kChunk * s.ldpb);   // masked P (bf16)
  s.sf = at, at += round128(sizeof(float) * p * s.ldsf);       // state S (f32)
  s.sb = at, at += round128(sizeof(bf16) * p * s.ldsb);        // bf16(S)
  s.bytes = at + mma::kSharedSlack;  // the kernel aligns the start (mma::align_shared)
  return s;
}

// Whether the causal mask keeps any of 16x16 tile (ti, tj) of a chunk's P.
__device__ __forceinline__ bool tile_live(ScanMode mode, int ti, int tj) {
  return mode == ScanMode::forward ? tj <= ti : mode == ScanMode::reverse ? tj >= ti : true;
}

// One block's share of a bf16 scan: its shared-memory tiles (SmemLayout), its place in the
// block, and the tensor-core steps the kernel composes (the phases at the top of this file).
// Each step is warp- or block-wide; the kernel places the barriers between them.
template <int kTileQ>
struct Bf16ScanBlock {
  static constexpr int kQT = kTileQ / kT;                         // 16-column tiles of O and S
  static constexpr int kOutPerWarp = kChunkTiles * kQT / kWarps;  // O tiles each warp owns
  using OutTiles = mma::Accumulator[kOutPerWarp];

  SmemLayout L;
  bf16 *xs, *ys, *ws;  // X, Y chunks (kChunk x ldx), W chunk tile (kChunk x ldw)
  float* pf;           // P in f32, then the O tile (kChunk x ldpf)
  bf16* pb;            // masked P in bf16 (kChunk x ldpb)
  float* sf;           // state S in f32 (p x ldsf)
  bf16* sb;            // bf16(S) (p x ldsb)
  int warp, lane, ptiles;

  __device__ Bf16ScanBlock(unsigned char* smem, int p) : L(smem_layout<kTileQ>(p)) {
    xs = reinterpret_cast<bf16*>(smem + L.xs);
    ys = reinterpret_cast<bf16*>(smem + L.ys);
    ws = reinterpret_cast<bf16*>(smem + L.ws);
    pf = reinterpret_cast<float*>(smem + L.pf);
    pb = reinterpret_cast<bf16*>(smem + L.pb);
    sf = reinterpret_cast<float*>(smem + L.sf);
    sb = reinterpret_cast<bf16*>(smem + L.sb);
    warp = threadIdx.x / device::kWarp;
    lane = threadIdx.x % device::kWarp;
    ptiles = p / kT;
  }

  // O tile u of this warp: (row tile, column tile). Spread so that each warp gets rows near and
  // far from the diagonal (the causal mask skips tiles above it).
  __device__ __forceinline__ int out_tile_row(int u) const { return (u * kWarps + warp) / kQT; }
  __device__ __forceinline__ int out_tile_col(int u) const { return (u * kWarps + warp) % kQT; }

  // S = 0, or the segment's prefix state from pass 2 (the scan phase of a split scan), and bf16(S).
  __device__ __forceinline__ void start_state(ScanPhase phase, const float* segment_state, int p, int p_cols,
                                              int q_cols, int wq) const {
    for (int idx = threadIdx.x; idx < p * kTileQ; idx += blockDim.x) {
      const int k = idx / kTileQ, m = idx % kTileQ;
      const float s0 =
          phase == ScanPhase::scan && segment_state && k < p_cols && m < wq ? segment_state[k * q_cols + m] : 0.0f;
      sf[k * L.ldsf + m] = s0;
      sb[k * L.ldsb + m] = mma::to_bf16(s0);
    }
  }

  // O = X bf16(S): tiles in registers.
  __device__ __forceinline__ void multiply_state(OutTiles& o) const {
    #pragma unroll
    for (int u = 0; u < kOutPerWarp; ++u) {
      const int ti = out_tile_row(u), tm = out_tile_col(u);
      mma::zero(o[u]);
      for (int k = 0; k < ptiles; ++k) {
        mma::FragmentA<mma::RowMajor> a;
        mma::FragmentB<mma::RowMajor> b;
        mma::load(a, xs + ti * kT * L.ldx + k * kT, L.ldx);
        mma::load(b, sb + k * kT * L.ldsb + tm * kT, L.ldsb);
        mma::multiply_add(o[u], a, b);
      }
    }
  }

  __device__ __forceinline__ void store_out(OutTiles& o) const {
    #pragma unroll
    for (int u = 0; u < kOutPerWarp; ++u)
      mma::store(pf + out_tile_row(u) * kT * L.ldpf + out_tile_col(u) * kT, o[u], L.ldpf);
  }

  // S += Y^T W over the chunk in the tiles; each warp owns whole 16x16 tiles of S and rounds
  // them to bf16 once its own stores are visible to its lanes.
  __device__ __forceinline__ void update_state() const {
    for (int t = warp; t < ptiles * kQT; t += kWarps) {
      const int kt = t / kQT, tm = t % kQT;
      mma::Accumulator acc;
      float* st = sf + kt * kT * L.ldsf + tm * kT;
      mma::load(acc, st, L.ldsf);
      for (int i = 0; i < kChunkTiles; ++i) {
        mma::FragmentA<mma::ColMajor> a;  // Y^T
        mma::FragmentB<mma::RowMajor> b;
        mma::load(a, ys + i * kT * L.ldx + kt * kT, L.ldx);
        mma::load(b, ws + i * kT * L.ldw + tm * kT, L.ldw);
        mma::multiply_add(acc, a, b);
      }
      mma::store(st, acc, L.ldsf);
      __syncwarp();
      for (int idx = lane; idx < kT * kT; idx += device::kWarp) {
        const int r = idx / kT, c = idx % kT;
        sb[(kt * kT + r) * L.ldsb + tm * kT + c] = mma::to_bf16(st[r * L.ldsf + c]);
      }
    }
  }

  // Phase B's first half: P = X Y^T on the tiles the mask keeps, dealt round-robin over the warps
  // (10 of the 16, 3 or 2 each); phase C never reads the others.
  __device__ __forceinline__ void chunk_product(ScanMode mode) const {
    for (int t = 0, live = 0; t < kChunkTiles * kChunkTiles; ++t) {
      const int ti = t / kChunkTiles, tj = t % kChunkTiles;
      if (!tile_live(mode, ti, tj) || live++ % kWarps != warp) continue;
      mma::Accumulator acc;
      mma::zero(acc);
      for (int k = 0; k < ptiles; ++k) {
        mma::FragmentA<mma::RowMajor> a;
        mma::FragmentB<mma::ColMajor> b;  // Y^T
        mma::load(a, xs + ti * kT * L.ldx + k * kT, L.ldx);
        mma::load(b, ys + tj * kT * L.ldx + k * kT, L.ldx);
        mma::multiply_add(acc, a, b);
      }
      mma::store(pf + ti * kT * L.ldpf + tj * kT, acc, L.ldpf);
    }
  }

  // Phase C: the mask inside the diagonal tiles, and bf16 for the tensor cores (pf is read only
  // where the mask keeps it, inside the live tiles B wrote).
  __device__ __forceinline__ void mask_product(ScanMode mode) const {
    for (int idx = threadIdx.x; idx < kChunk * kChunk; idx += blockDim.x) {
      const int i = idx / kChunk, j = idx % kChunk;
      const bool keep = mode == ScanMode::forward ? j <= i : j >= i;
      pb[i * L.ldpb + j] = mma::to_bf16(keep ? pf[i * L.ldpf + j] : 0.0f);
    }
  }

  // Phase D's first half: O += P W on the live tiles.
  __device__ __forceinline__ void add_intra_chunk(ScanMode mode, OutTiles& o) const {
    #pragma unroll
    for (int u = 0; u < kOutPerWarp; ++u) {
      const int ti = out_tile_row(u), tm = out_tile_col(u);
      for (int k = 0; k < kChunkTiles; ++k) {
        if (!tile_live(mode, ti, k)) continue;
        mma::FragmentA<mma::RowMajor> a;
        mma::FragmentB<mma::RowMajor> b;
        mma::load(a, pb + ti * kT * L.ldpb + k * kT, L.ldpb);
        mma::load(b, ws + k * kT * L.ldw + tm * kT, L.ldw);
        mma::multiply_add(o[u], a, b);
      }
    }
  }
};

// x: (B,H,nx,.) y, w: (B,H,ny,.) -> out (B,H,nx,q); grid (column tiles, slices). p: the padded
// width of X and Y. Barriers: each phase reads what the previous one wrote (see the top of file).
// Two blocks per SM is what the shared memory allows for the common widths (57 to 91 KB at
// p <= 80); saying so lets ptxas take the registers it needs (about 100 to 140) rather than
// spill at 64 to 80, as it did without the hint.
template <int kTileQ>
__global__ void __launch_bounds__(kThreads, 2)
    linear_attention_bf16_scan_kernel(Operand x, Operand y, Operand w, Output out, int p, ScanMode mode,
                                      ScanPhase phase, int64_t heads, int64_t slices, float* states) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const Bf16ScanBlock<kTileQ> b(mma::align_shared(smem_unaligned), p);
  const int c0 = blockIdx.x * kTileQ;
  // Split scans (grid z = segments > 1): the segment states are (slices, segments, p_cols,
  // q_cols), only the real columns of X, Y (ones included) and of the output.
  const int z = blockIdx.z, segments = gridDim.z;
  const int p_cols = y.cols + y.ones, q_cols = out.cols;
  const int wq = q_cols - c0 < kTileQ ? q_cols - c0 : kTileQ;  // real output columns of the tile

  for (int64_t bh = blockIdx.y; bh < slices; bh += gridDim.y) {
    float* segment_state = states ? states + (bh * segments + z) * p_cols * q_cols + c0 : nullptr;
    // The previous slice read the state last before a barrier; the first reads of this one
    // follow the barrier after the first loads.
    b.start_state(phase, segment_state, p, p_cols, q_cols, wq);

    if (phase == ScanPhase::segment_state) {  // pass 1: this segment's Y^T W, unscanned
      int64_t first, last;
      segment_chunks(y.rows, kChunk, z, segments, first, last);
      for (int64_t c = first; c < last; ++c) {
        load_tile(y, bh, heads, c * kChunk, 0, p, b.ys, b.L.ldx);
        load_tile(w, bh, heads, c * kChunk, c0, kTileQ, b.ws, b.L.ldw);
        __syncthreads();
        b.update_state();
        __syncthreads();  // the next loads overwrite ys, ws; the copy below reads sf
      }
      __syncthreads();  // an empty segment has no barrier between the zeroing and this read
      for (int idx = threadIdx.x; idx < p_cols * wq; idx += blockDim.x) {
        const int k = idx / wq, m = idx % wq;
        segment_state[k * q_cols + m] = b.sf[k * b.L.ldsf + m];
      }
      __syncthreads();  // the next slice's zeroing overwrites the sf this copy reads
      continue;
    }

    int64_t first, last;
    segment_chunks(x.rows, kChunk, z, segments, first, last);
    if (mode == ScanMode::full) {
      // Bidirectional: the whole S (from pass 2's total when split), then this segment's rows.
      for (int64_t r0 = 0; !states && r0 < y.rows; r0 += kChunk) {
        load_tile(y, bh, heads, r0, 0, p, b.ys, b.L.ldx);
        load_tile(w, bh, heads, r0, c0, kTileQ, b.ws, b.L.ldw);
        __syncthreads();
        b.update_state();
        __syncthreads();  // the next loads overwrite ys, ws; the products read sb
      }
      for (int64_t r0 = first * kChunk; r0 < last * kChunk; r0 += kChunk) {
        load_tile(x, bh, heads, r0, 0, p, b.xs, b.L.ldx);
        __syncthreads();
        typename Bf16ScanBlock<kTileQ>::OutTiles o;
        b.multiply_state(o);
        b.store_out(o);
        __syncthreads();
        write_tile(out, bh, heads, r0, c0, kTileQ, b.pf, b.L.ldpf);
      }
      continue;
    }

    const int64_t chunks = last - first;
    for (int64_t step = 0; step < chunks; ++step) {
      const int64_t r0 = (mode == ScanMode::reverse ? last - 1 - step : first + step) * kChunk;
      // A: loads.
      load_tile(x, bh, heads, r0, 0, p, b.xs, b.L.ldx);
      load_tile(y, bh, heads, r0, 0, p, b.ys, b.L.ldx);
      load_tile(w, bh, heads, r0, c0, kTileQ, b.ws, b.L.ldw);
      __syncthreads();
      // B: P = X Y^T on the live tiles, then O = X S.
      b.chunk_product(mode);
      typename Bf16ScanBlock<kTileQ>::OutTiles o;
      b.multiply_state(o);
      __syncthreads();
      // C: P masked and rounded to bf16.
      b.mask_product(mode);
      __syncthreads();
      // D: O += P W (into pf, free since C), then the state.
      b.add_intra_chunk(mode, o);
      b.store_out(o);
      if (step + 1 < chunks) b.update_state();
      __syncthreads();
      // E: the chunk's output rows (the next chunk's loads touch none of pf).
      write_tile(out, bh, heads, r0, c0, kTileQ, b.pf, b.L.ldpf);
    }
  }
}

// m[r] = max of row r of x (rows, d), one warp per row: the shift of the exp feature map.
__global__ void linear_attention_bf16_row_max_kernel(const bf16* x, float* m, int64_t rows, int d) {
  const int lane = threadIdx.x % device::kWarp;
  device::for_each_row_of_warp(rows, [&](int64_t r) {
    float best = -__int_as_float(0x7f800000);
    for (int k = lane; k < d; k += device::kWarp) best = fmaxf(best, mma::to_float(x[r * d + k]));
    best = device::warp_reduce(best, device::Max());
    if (lane == 0) m[r] = best;
  });
}

// The exp map's backward, one warp per row (it needs the whole row): g (rows, d) f32 holds
// dL/dphi from the scan, dx = y o g - [k == top] (y . g) with y = exp(x - max x) recomputed
// from the raw row and top its first argmax (the CPU's rule, kernels/cuda/feature_maps.cuh).
// Rows of padded keys (pad (batch, rows_per_slice), nonzero) are written as zeros.
__global__ void linear_attention_bf16_exp_backward_kernel(const bf16* x, const float* g, bf16* dx, const float* pad,
                                                          int64_t rows, int64_t rows_per_slice, int64_t heads,
                                                          int d) {
  device::for_each_row_of_warp(rows, [&](int64_t r) {
    const bf16* xr = x + r * d;
    const float* gr = g + r * d;
    bf16* dxr = dx + r * d;
    const int64_t slice = r / rows_per_slice, row = r % rows_per_slice;
    const bool padded = pad && pad[(slice / heads) * rows_per_slice + row] != 0.0f;
    fmap::exp_row_backward([xr](int k) { return mma::to_float(xr[k]); }, [gr](int k) { return gr[k]; },
                           [dxr, padded](int k, float v) { dxr[k] = mma::to_bf16(padded ? 0.0f : v); }, d);
  });
}

// Launches a scan, split into `segments` (pass 1, pass 2, pass 3; states: their workspace) when
// there are more than one.
template <int kTileQ>
void launch_scan(const Operand& x, const Operand& y, const Operand& w, const Output& out, int p, int q_padded,
                 int64_t heads, int64_t slices, ScanMode mode, int64_t segments, float* states) {
  const size_t smem = smem_layout<kTileQ>(p).bytes;
  if (smem > 48 * 1024)
    TARN_CUDA_CALL(cudaFuncSetAttribute(linear_attention_bf16_scan_kernel<kTileQ>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const bool split = segments > 1;
  const dim3 grid(static_cast<unsigned>((q_padded + kTileQ - 1) / kTileQ),
                  static_cast<unsigned>(std::min<int64_t>(slices, device::kMaxGridY)),
                  static_cast<unsigned>(split ? segments : 1));
  if (split) {
    tarn::launch(linear_attention_bf16_scan_kernel<kTileQ>, grid, kThreads, smem, nullptr, x, y, w, out, p,
                 mode, ScanPhase::segment_state, heads, slices, states);
    segment_prefix(states, slices, segments, static_cast<int64_t>(y.cols + y.ones) * out.cols, mode);
  }
  tarn::launch(linear_attention_bf16_scan_kernel<kTileQ>, grid, kThreads, smem, nullptr, x, y, w, out, p,
               mode, ScanPhase::scan, heads, slices, split ? states : nullptr);
}

// One scan: X, Y of p_cols columns (ones included), W and the output of q_cols. Every column
// tile recomputes the chunk products P, so the tile (16, 32 or 64 columns) is the one with the
// least work in multiply-adds per chunk row, tiles x (P: kChunk p / 2 + X S, S update: 2 p t +
// P W: kChunk t / 2), among those whose shared memory the device grants: e + 1 = 65 columns
// (padded to 80) take three tiles of 32 rather than two of 64.
void scan(const char* op, const Operand& x, const Operand& y, const Operand& w, const Output& out, int p_cols,
          int q_cols, int64_t heads, int64_t slices, ScanMode mode, int64_t segments, float* states) {
  if (slices == 0 || x.rows == 0) return;
  const int p = round16(p_cols), q = round16(q_cols);
  const size_t limit = static_cast<size_t>(device::max_dynamic_smem());
  auto bytes = [&](int t) {
    return t == 16 ? smem_layout<16>(p).bytes : t == 32 ? smem_layout<32>(p).bytes : smem_layout<64>(p).bytes;
  };
  auto work = [&](int t) {
    return static_cast<double>((q + t - 1) / t) * (kChunk * p / 2.0 + (2.0 * p + kChunk / 2.0) * t);
  };
  int tile = 0;
  for (int t : {64, 32, 16})
    if (bytes(t) <= limit && (tile == 0 || work(t) < work(tile))) tile = t;
  TARN_ASSERT(tile != 0, op, ": the scan over ", p_cols, " columns needs ", bytes(16),
              " bytes of shared memory, more than the device's ", limit);
  switch (tile) {
    case 16: launch_scan<16>(x, y, w, out, p, q, heads, slices, mode, segments, states); break;
    case 32: launch_scan<32>(x, y, w, out, p, q, heads, slices, mode, segments, states); break;
    default: launch_scan<64>(x, y, w, out, p, q, heads, slices, mode, segments, states); break;
  }
}

void check_args(const char* op, const LinearAttentionDims& dims, const LinearAttentionConfig& cfg) {
  check_linear_attention_args(op, dims, cfg);
  TARN_ASSERT(dims.d >= 1 && dims.d <= kMaxDim && dims.e >= 1 && dims.e <= kMaxDim, op, ": d=", dims.d, " and e=",
              dims.e, " must lie in [1, ", kMaxDim, "] for the bf16 kernels");
}

// The workspace, in floats from its start:
//   [0, u)        U (forward) or G (backward): (B, H, Nq, e + 1)
//   exp map only: the raw rows' maxima of q (B, H, Nq) and k (B, H, Nk), and for backward an f32
//                 (B, H, max(Nq, Nk), d) for dL/dphi(q), then dL/dphi(k), before the row pass
//   split only:   the segment states, (B, H, segments, p, q) with p q <= d (e + 1) for every scan
struct Workspace {
  size_t u, q_max, k_max, rows, states, total;
  int64_t segments;
};

// The segments every scan of one call uses (the narrower of the outputs has the fewest column
// tiles to spread; tiles of 64 columns assumed, the widest the scan picks): one plan per call,
// so that the workspace query and the call agree.
int64_t call_segments(const LinearAttentionDims& dims) {
  auto tiles = [](int64_t cols) { return (cols + 63) / 64; };
  const int64_t chunks = (std::max(dims.n_q, dims.n_k) + kChunk - 1) / kChunk;
  return plan_segments(chunks, kMinChunksPerSegment, dims.batch * dims.heads * std::min(tiles(dims.d), tiles(dims.e)));
}

Workspace workspace_layout(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, bool backward) {
  const size_t slices = static_cast<size_t>(dims.batch * dims.heads);
  Workspace w{};
  w.u = 0;
  size_t at = slices * dims.n_q * (dims.e + 1);
  if (cfg.feature_map == FeatureMap::exp) {
    w.q_max = at, at += slices * dims.n_q;
    w.k_max = at, at += slices * dims.n_k;
    if (backward) w.rows = at, at += slices * std::max(dims.n_q, dims.n_k) * dims.d;
  }
  w.segments = call_segments(dims);
  if (w.segments > 1) w.states = at, at += slices * w.segments * dims.d * (dims.e + 1);
  w.total = at;
  return w;
}

// The exp map's row maxima of q and k into the workspace (no-op for other maps).
void compute_row_maxima(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg, const ::tarn::bf16* q,
                        const ::tarn::bf16* k, float* workspace, const Workspace& w) {
  if (cfg.feature_map != FeatureMap::exp) return;
  const int64_t slices = dims.batch * dims.heads, d = dims.d;
  const int64_t q_rows = slices * dims.n_q, k_rows = slices * dims.n_k;
  if (q_rows > 0)
    tarn::launch(linear_attention_bf16_row_max_kernel, device::grid_for(q_rows * device::kWarp), device::kBlock, 0,
                 nullptr, device_bf16(q), workspace + w.q_max, q_rows, static_cast<int>(d));
  if (k_rows > 0)
    tarn::launch(linear_attention_bf16_row_max_kernel, device::grid_for(k_rows * device::kWarp), device::kBlock, 0,
                 nullptr, device_bf16(k), workspace + w.k_max, k_rows, static_cast<int>(d));
}

// What a pass asks for in floats of workspace, its arguments checked first.
// (Enough for either path: which one runs also depends on the buffers' alignment.)
size_t checked_workspace_floats(const char* op, const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                                bool backward) {
  check_args(op, dims, cfg);
  const size_t scan = workspace_layout(dims, cfg, backward).total;
  return chunked_bf16::supported(dims, cfg, {}) ? std::max(scan, chunked_bf16::workspace_floats(dims)) : scan;
}

}  // namespace

size_t linear_attention_bf16_forward_workspace_floats(const LinearAttentionDims& dims,
                                                      const LinearAttentionConfig& cfg) {
  return checked_workspace_floats("linear_attention_bf16_forward", dims, cfg, false);
}

void linear_attention_bf16_forward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                                   const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,
                                   ::tarn::bf16* out, float* den, float* workspace, size_t workspace_floats_given) {
  const char* op = "linear_attention_bf16_forward";
  check_args(op, dims, cfg);
  if (chunked_bf16::supported(dims, cfg, {q, k, v, out, workspace})) {
    check_workspace(op, workspace, workspace_floats_given, chunked_bf16::workspace_floats(dims));
    chunked_bf16::forward(dims, cfg, q, k, v, out, den, workspace);
    return;
  }
  const Workspace ws = workspace_layout(dims, cfg, false);
  check_workspace(op, workspace, workspace_floats_given, ws.total);
  const int64_t slices = dims.batch * dims.heads, rows = slices * dims.n_q;
  if (rows == 0) return;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  const FeatureMap fm = cfg.feature_map, id = FeatureMap::identity;
  const bool exp_map = fm == FeatureMap::exp;
  compute_row_maxima(dims, cfg, q, k, workspace, ws);
  const Operand xq{device_bf16(q), nullptr, dims.n_q, d, d, 0, nullptr, fm, exp_map ? workspace + ws.q_max : nullptr};
  const Operand yk{device_bf16(k), nullptr, dims.n_k, d, d, 0, cfg.key_padding_mask, fm,
                   exp_map ? workspace + ws.k_max : nullptr};
  const Operand wv{device_bf16(v), nullptr, dims.n_k, e, e, 1, nullptr, id, nullptr};
  const Output u{workspace, nullptr, dims.n_q, e + 1, nullptr, id, nullptr};
  scan(op, xq, yk, wv, u, d, e + 1, dims.heads, slices, cfg.causal ? ScanMode::forward : ScanMode::full, ws.segments,
       workspace + ws.states);
  normalize_rows(static_cast<const float*>(workspace), device_bf16(out), den, rows, e, cfg.eps);
}

size_t linear_attention_bf16_backward_workspace_floats(const LinearAttentionDims& dims,
                                                       const LinearAttentionConfig& cfg) {
  return checked_workspace_floats("linear_attention_bf16_backward", dims, cfg, true);
}

void linear_attention_bf16_backward(const LinearAttentionDims& dims, const LinearAttentionConfig& cfg,
                                    const ::tarn::bf16* q, const ::tarn::bf16* k, const ::tarn::bf16* v,
                                    const ::tarn::bf16* out, const float* den, const ::tarn::bf16* dout,
                                    ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* workspace,
                                    size_t workspace_floats_given) {
  const char* op = "linear_attention_bf16_backward";
  check_args(op, dims, cfg);
  if (!dq && !dk && !dv) return;
  if (chunked_bf16::supported(dims, cfg, {q, k, v, out, dout, dq, dk, dv, workspace})) {
    check_workspace(op, workspace, workspace_floats_given, chunked_bf16::workspace_floats(dims));
    chunked_bf16::backward(dims, cfg, q, k, v, out, den, dout, dq, dk, dv, workspace);
    return;
  }
  const Workspace ws = workspace_layout(dims, cfg, true);
  check_workspace(op, workspace, workspace_floats_given, ws.total);
  const int64_t slices = dims.batch * dims.heads, q_rows = slices * dims.n_q;
  const int d = static_cast<int>(dims.d), e = static_cast<int>(dims.e);
  compute_g(device_bf16(dout), device_bf16(out), den, workspace, q_rows, e, cfg.eps);
  const FeatureMap fm = cfg.feature_map, id = FeatureMap::identity;
  const bool exp_map = fm == FeatureMap::exp;
  compute_row_maxima(dims, cfg, q, k, workspace, ws);
  const float* q_max = exp_map ? workspace + ws.q_max : nullptr;
  const float* k_max = exp_map ? workspace + ws.k_max : nullptr;
  const float* pad = cfg.key_padding_mask;
  const Operand a_op{device_bf16(q), nullptr, dims.n_q, d, d, 0, nullptr, fm, q_max};
  const Operand b_op{device_bf16(k), nullptr, dims.n_k, d, d, 0, pad, fm, k_max};
  const Operand v_op{device_bf16(v), nullptr, dims.n_k, e, e, 1, nullptr, id, nullptr};
  const Operand g_op{nullptr, workspace, dims.n_q, e + 1, e + 1, 0, nullptr, id, nullptr};
  const Operand g_main{nullptr, workspace, dims.n_q, e, e + 1, 0, nullptr, id, nullptr};  // dV' without its ones column
  const ScanMode fwd = cfg.causal ? ScanMode::forward : ScanMode::full;
  const ScanMode rev = cfg.causal ? ScanMode::reverse : ScanMode::full;
  // dq and dk: phi' chained into the scan's output for the elementwise maps; for exp, dL/dphi
  // in f32 to the workspace first, then the row pass.
  auto feature_grad = [&](const ::tarn::bf16* x, ::tarn::bf16* dx, int64_t n, const float* row_pad) {
    return exp_map ? Output{workspace + ws.rows, nullptr, n, d, nullptr, id, nullptr}
                   : Output{nullptr, device_bf16(dx), n, d, device_bf16(x), fm, row_pad};
  };
  auto exp_backward = [&](const ::tarn::bf16* x, ::tarn::bf16* dx, int64_t n, const float* row_pad) {
    const int64_t rows = slices * n;
    if (!exp_map || rows == 0) return;
    tarn::launch(linear_attention_bf16_exp_backward_kernel, device::grid_for(rows * device::kWarp), device::kBlock, 0,
                 nullptr, device_bf16(x), static_cast<const float*>(workspace + ws.rows), device_bf16(dx), row_pad,
                 rows, n, dims.heads, d);
  };
  if (dq) {
    scan(op, g_op, v_op, b_op, feature_grad(q, dq, dims.n_q, nullptr), e + 1, d, dims.heads, slices, fwd, ws.segments,
         workspace + ws.states);
    exp_backward(q, dq, dims.n_q, nullptr);
  }
  if (dk) {
    scan(op, v_op, g_op, a_op, feature_grad(k, dk, dims.n_k, pad), e + 1, d, dims.heads, slices, rev, ws.segments,
         workspace + ws.states);
    exp_backward(k, dk, dims.n_k, pad);
  }
  if (dv)
    scan(op, b_op, a_op, g_main, Output{nullptr, device_bf16(dv), dims.n_k, e, nullptr, id, nullptr}, d, e,
         dims.heads, slices, rev, ws.segments, workspace + ws.states);
}

void linear_attention_bf16_set_chunk_parallel(bool enabled) { chunked_bf16::set_enabled(enabled); }

}  // namespace tarn::kernels::TARN_CUDA_NS
