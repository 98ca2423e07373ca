// Chunk-parallel linear attention in bf16 (kernels/cuda/linear_attention_chunked_bf16.cuh),
// the structure of flash-linear-attention's chunk kernels (ops/common/chunk_h.py, chunk_o.py)
// with tarn's normaliser carried as a vector beside the state. Chunks of C = 64 rows; phi is
// the feature map applied on load; V' = [v | 1] is never formed: its ones column is the vector
// z = sum phi(k) beside S = sum phi(k)^T v.
//
// Forward, three launches, each parallel over (chunk, batch*head) or over state elements:
//   1 local    per chunk c: h_c = phi(K_c)^T V_c (d x e, f32) and z_c = column sums of phi(K_c)
//   2 prefix   per state element, in chunk order: S_c = sum_{c' < c} h_c' (bf16), z_c (f32)
//   3 output   per chunk: P = phi(Q_c) phi(K_c)^T masked to j <= i (registers),
//              num = P V_c + phi(Q_c) S_c,  den = rowsum(P) + phi(Q_c) . z_c,
//              out = num / (den + eps)
// Backward, with G_v = dO / (den + eps) and g_n = -(dO . out) / (den + eps) per row (so that
// G = [G_v | g_n] is dL/d[num | den]):
//   1 local    h_c, z_c as forward, then dh_c = phi(Q_c)^T G_v,c and dz_c = phi(Q_c)^T g_n,c
//   2 prefix   S_c, z_c as forward; suffix: dS_c = sum_{c' > c} dh_c', dz_c likewise
//   3 grads    per chunk, D = G_v V^T + g_n 1^T and P as forward, both masked to j <= i:
//              dphi(Q) = D phi(K) + G_v S_c^T + g_n z_c^T
//              dphi(K) = D^T phi(Q) + V dS_c^T + 1 dz_c^T
//              dV      = P^T G_v + phi(K) dS_c
//              then phi' chained in from the raw q and k, and padded keys' dk, dv zero.
// The states are the only thing kept between launches: (B*H, chunks) of them, linear in N; the
// backward recomputes them from q, k, v, out, den and dout instead of the forward keeping them.
//
// Bidirectional (encoder) and cross-attention, the same launches without the mask: launch 1
// over the key chunks (forward; backward also over the query chunks), launch 2 sums them all
// into one state per slice (total_kernel) that every query chunk reads, and launch 3 drops
// the intra-chunk scores (P, D): out = phi(Q) S / (phi(Q) . z + eps), dphi(Q) = G_v S^T +
// g_n z^T, dphi(K) = V dS^T + 1 dz^T, dV = phi(K) dS. Query and key chunks are counted apart
// (n_q and n_k may differ); the gradients' grid covers the more of them.
//
// Each chunk kernel: 4 warps, warp w owns rows 16 w .. 16 w + 15 of the chunk (queries for
// out and dq, keys for dk and dv). Operands go global -> shared with cp.async (16 bytes a
// copy, zero-filled past the sequence and past d or e), the feature map is applied in place,
// and every product runs on mma.sync m16n8k16 from ldmatrix fragments (kernels/cuda/warp_mma.cuh),
// the masked P and D staying in registers as the A operand of the next product. d and e are
// padded to kDim (32, 64 or 128) columns of zeros.
#include <atomic>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/feature_maps.cuh"
#include "kernels/cuda/linear_attention_chunked_bf16.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/warp_mma.cuh"

namespace tarn::kernels::TARN_CUDA_NS {
namespace chunked_bf16 {
namespace {

using cpu::FeatureMap;
using mma::bf16;
namespace wm = warp_mma;

constexpr int kC = 64;  // rows per chunk
constexpr int kWarps = kC / 16;
constexpr int kThreads = kWarps * device::kWarp;
constexpr int kPad = 8;  // bf16 per shared row beyond kDim: rows start 16 bytes apart in banks
constexpr int kMaxDim = 128;

// Everything a launch reads and writes; pointers into one (batch*head) slice are formed inside.
struct Args {
  const bf16 *q, *k, *v, *out, *dout;
  const float *den, *pad;  // pad: (batch, n) key padding mask, nonzero = padded; may be null
  bf16 *out_w, *dq, *dk, *dv;
  float* den_w;
  float* local;  // (slices, chunks, kDim (kDim + 1)): h_c then z_c
  bf16 *state, *dstate;  // (slices, chunks, kDim, kDim)
  float *z, *dz;  // (slices, chunks, kDim)
  int64_t n, n_k, heads, chunks;  // n: query rows, n_k: key rows (n in the causal form)
  int d, e;
  FeatureMap fm;
  float eps;
};

template <int kDim>
struct Shape {
  static constexpr int ld = kDim + kPad;                              // elements per shared row
  static constexpr size_t rows_bytes = sizeof(bf16) * kC * ld;        // a chunk of rows
  static constexpr size_t state_bytes = sizeof(bf16) * kDim * ld;     // a state
  static constexpr int local_floats = kDim * (kDim + 1);
};

__device__ __forceinline__ const float* padding_of(const Args& a, int64_t slice) {
  return a.pad ? a.pad + (slice / a.heads) * a.n_k : nullptr;
}

// Rows row0 .. row0 + kC - 1 of the slice's (n, cols) row-major matrix g to shared s (kC x ld),
// zeros past n and past cols (cols a multiple of 8). One cp.async group, not waited for.
template <int kDim>
__device__ void load_rows(bf16* s, const bf16* g, int64_t row0, int64_t n, int cols) {
  constexpr int kUnits = kDim / 8;
  for (int u = threadIdx.x; u < kC * kUnits; u += kThreads) {
    const int r = u / kUnits, c = (u % kUnits) * 8;
    const bool ok = row0 + r < n && c < cols;
    async::copy16_or_zero(s + r * Shape<kDim>::ld + c, ok ? g + (row0 + r) * cols + c : g, ok);
  }
}

// A kDim x kDim state (dense in global memory) to shared s (kDim x ld).
template <int kDim>
__device__ void load_state(bf16* s, const bf16* g) {
  constexpr int kUnits = kDim / 8;
  for (int u = threadIdx.x; u < kDim * kUnits; u += kThreads) {
    const int r = u / kUnits, c = (u % kUnits) * 8;
    async::copy16(s + r * Shape<kDim>::ld + c, g + r * kDim + c);
  }
}

// phi in place on the chunk's real rows and columns (the zero padding stays zero: elu1(0) is
// 1); padded keys (row_pad nonzero) become zero rows.
template <int kDim>
__device__ void apply_feature_map(bf16* s, FeatureMap fm, int64_t row0, int64_t n, int cols, const float* row_pad) {
  if (fm == FeatureMap::identity && !row_pad) return;
  for (int i = threadIdx.x; i < kC * kDim; i += kThreads) {
    const int r = i / kDim, c = i % kDim;
    if (c >= cols || row0 + r >= n) continue;
    bf16& x = s[r * Shape<kDim>::ld + c];
    const bool padded = row_pad && row_pad[row0 + r] != 0.0f;
    x = mma::to_bf16(padded ? 0.0f : fmap::phi_elementwise(fm, mma::to_float(x)));
  }
}

// Row buffer i of a chunk kernel's shared memory (kC x ld bf16 each, from the start).
template <int kDim>
__device__ __forceinline__ bf16* row_buffer(unsigned char* smem, int i) {
  return reinterpret_cast<bf16*>(smem + i * Shape<kDim>::rows_bytes);
}

// The chunk's q, k, v rows into row buffers 0, 1, 2 (cp.async, not waited for), and, once the
// caller has waited and synchronised, phi on q and on k (padded keys zero).
template <int kDim>
__device__ void load_chunk_qkv(unsigned char* smem, const Args& a, int64_t slice, int64_t row0) {
  load_rows<kDim>(row_buffer<kDim>(smem, 0), a.q + slice * a.n * a.d, row0, a.n, a.d);
  load_rows<kDim>(row_buffer<kDim>(smem, 1), a.k + slice * a.n_k * a.d, row0, a.n_k, a.d);
  load_rows<kDim>(row_buffer<kDim>(smem, 2), a.v + slice * a.n_k * a.e, row0, a.n_k, a.e);
}
template <int kDim>
__device__ void map_chunk_qk(unsigned char* smem, const Args& a, int64_t slice, int64_t row0) {
  apply_feature_map<kDim>(row_buffer<kDim>(smem, 0), a.fm, row0, a.n, a.d, nullptr);
  apply_feature_map<kDim>(row_buffer<kDim>(smem, 1), a.fm, row0, a.n_k, a.d, padding_of(a, slice));
}

// G_v = dO / (den + eps) in place of dO (shared, bf16), and g_n = -(dO . out) / (den + eps)
// per row (0 past n), a warp per row.
template <int kDim>
__device__ void gradient_rows(bf16* g, const bf16* o, float* gn, const float* den, int64_t row0, int64_t n, int e,
                              float eps) {
  const int lane = threadIdx.x % device::kWarp, warp = threadIdx.x / device::kWarp;
  for (int r = warp; r < kC; r += kWarps) {
    bf16* gr = g + r * Shape<kDim>::ld;
    const bf16* orow = o + r * Shape<kDim>::ld;
    float dot = 0.0f;
    for (int c = lane; c < e; c += device::kWarp) dot += mma::to_float(gr[c]) * mma::to_float(orow[c]);
    dot = device::warp_reduce(dot, device::Sum());
    const bool real = row0 + r < n;
    const float inv = real ? 1.0f / (den[row0 + r] + eps) : 0.0f;
    for (int c = lane; c < e; c += device::kWarp) gr[c] = mma::to_bf16(mma::to_float(gr[c]) * inv);
    if (lane == 0) gn[r] = -dot * inv;
  }
}

__device__ __forceinline__ float round_bf16(float x) { return mma::to_float(mma::to_bf16(x)); }

// Sums of two accumulator halves over a lane quad (the four lanes that share rows g, g + 8).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(device::kFullMask, x, 1);
  x += __shfl_xor_sync(device::kFullMask, x, 2);
  return x;
}

// acc (kDim/8 tiles of 16 x 8 f32: rows row0 .. +15 of the output, columns 8 t ..) += A B for
// the kDim columns of B, B's k rows k0 .. k0 + 15: B k-major (rows k) or n-major (rows n) in s.
template <int kDim, bool kKMajor>
__device__ __forceinline__ void multiply_add_tiles(wm::FragC (&acc)[kDim / 8], const wm::FragA& a, const bf16* s,
                                                   int k0) {
#pragma unroll
  for (int np = 0; np < kDim / 16; ++np) {
    wm::FragB b[2];
    if (kKMajor)
      wm::load_b_k_major(b, s, Shape<kDim>::ld, k0, 16 * np);
    else
      wm::load_b_n_major(b, s, Shape<kDim>::ld, 16 * np, k0);
    wm::mma(acc[2 * np], a, b[0]);
    wm::mma(acc[2 * np + 1], a, b[1]);
  }
}

// The warp's 16 x 64 chunk product X Y^T (X rows 16 w .., Y rows all keys or queries; both
// n-major kDim-column tiles in shared memory) on the column pairs the causal mask needs:
// pairs 0 .. w (below) or w .. 3 (above the diagonal).
template <int kDim, bool kBelow>
__device__ __forceinline__ void chunk_scores(wm::FragC (&p)[8], const wm::FragA (&x)[kDim / 16], const bf16* y, int w) {
#pragma unroll
  for (int t = 0; t < 8; ++t) wm::zero(p[t]);
#pragma unroll
  for (int pp = 0; pp < kWarps; ++pp) {
    if (kBelow ? pp > w : pp < w) continue;
#pragma unroll
    for (int ks = 0; ks < kDim / 16; ++ks) {
      wm::FragB b[2];
      wm::load_b_n_major(b, y, Shape<kDim>::ld, 16 * pp, 16 * ks);
      wm::mma(p[2 * pp], x[ks], b[0]);
      wm::mma(p[2 * pp + 1], x[ks], b[1]);
    }
  }
}

// Zeroes the diagonal pair's elements that the causal mask removes: column (key or query)
// index 16 w + 8 h + col against row 16 w + row; kBelow keeps col <= row, else col >= row.
template <bool kBelow>
__device__ __forceinline__ void mask_diagonal(wm::FragC (&p)[8], int w) {
  const int lane = wm::lane_id();
#pragma unroll
  for (int pp = 0; pp < kWarps; ++pp) {
    if (pp != w) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int el = 0; el < 4; ++el) {
        const int col = 8 * h + wm::c_col(lane, el), row = wm::c_row(lane, el);
        if (kBelow ? col > row : col < row) p[2 * pp + h].r[el] = 0.0f;
      }
  }
}

// acc += (masked scores) W for the pairs kept (W: k-major rows of keys or queries in s).
template <int kDim, bool kBelow>
__device__ __forceinline__ void scores_times(wm::FragC (&acc)[kDim / 8], const wm::FragC (&p)[8], const bf16* s,
                                             int w) {
#pragma unroll
  for (int pp = 0; pp < kWarps; ++pp) {
    if (kBelow ? pp > w : pp < w) continue;
    const wm::FragA a = wm::accumulator_to_a(p[2 * pp], p[2 * pp + 1]);
    multiply_add_tiles<kDim, true>(acc, a, s, 16 * pp);
  }
}

template <int kDim>
__device__ __forceinline__ void load_row_fragments(wm::FragA (&x)[kDim / 16], const bf16* s, int w) {
#pragma unroll
  for (int ks = 0; ks < kDim / 16; ++ks) wm::load_a(x[ks], s, Shape<kDim>::ld, 16 * w, 16 * ks);
}

template <int kDim>
__device__ __forceinline__ void zero_tiles(wm::FragC (&acc)[kDim / 8]) {
#pragma unroll
  for (int t = 0; t < kDim / 8; ++t) wm::zero(acc[t]);
}

// Writes the warp's 16 rows of acc (row r of the chunk = 16 w + c_row) to the slice's (n, cols)
// bf16 matrix, f(row, col, value) giving each element's final value.
template <int kDim, typename F>
__device__ __forceinline__ void store_tiles(bf16* g, const wm::FragC (&acc)[kDim / 8], int64_t row0, int64_t n,
                                           int cols, int w, F f) {
  const int lane = wm::lane_id();
#pragma unroll
  for (int t = 0; t < kDim / 8; ++t)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + 16 * w + wm::c_row(lane, 2 * half);
      const int col = 8 * t + wm::c_col(lane, 0);
      if (row >= n || col >= cols) continue;
      const float x0 = f(row, col, acc[t].r[2 * half]), x1 = f(row, col + 1, acc[t].r[2 * half + 1]);
      *reinterpret_cast<uint32_t*>(g + row * cols + col) = wm::pack_bf16x2(x0, x1);
    }
}

// ---------------------------------------------------------------------------------------------
// Launch 1: a chunk's own contribution to the state, X^T W and the weighted column sums of X:
// forward X = phi(K), W = V, weights 1; backward X = phi(Q), W = G_v, weights g_n.
template <int kDim, bool kGrad>
__global__ void __launch_bounds__(kThreads) local_state_kernel(Args a) {
  TARN_DYNAMIC_SHARED(unsigned char, smem);
  using S = Shape<kDim>;
  bf16* xs = reinterpret_cast<bf16*>(smem);
  bf16* ws = reinterpret_cast<bf16*>(smem + S::rows_bytes);
  bf16* os = reinterpret_cast<bf16*>(smem + 2 * S::rows_bytes);  // backward: out rows
  float* weights = reinterpret_cast<float*>(smem + (kGrad ? 3 : 2) * S::rows_bytes);
  const int64_t slice = blockIdx.y, chunk = blockIdx.x, row0 = chunk * kC;
  const int64_t rows = kGrad ? a.n : a.n_k, at = slice * rows;  // queries or keys
  load_rows<kDim>(xs, (kGrad ? a.q : a.k) + at * a.d, row0, rows, a.d);
  load_rows<kDim>(ws, (kGrad ? a.dout : a.v) + at * a.e, row0, rows, a.e);
  if (kGrad) load_rows<kDim>(os, a.out + at * a.e, row0, rows, a.e);
  async::wait_all();
  __syncthreads();
  apply_feature_map<kDim>(xs, a.fm, row0, rows, a.d, kGrad ? nullptr : padding_of(a, slice));
  if (kGrad)
    gradient_rows<kDim>(ws, os, weights, a.den + at, row0, rows, a.e, a.eps);
  else
    for (int r = threadIdx.x; r < kC; r += kThreads) weights[r] = 1.0f;
  __syncthreads();

  float* local = a.local + (slice * a.chunks + chunk) * S::local_floats;
  const int w = threadIdx.x / device::kWarp, lane = wm::lane_id();
  for (int mt = w; mt < kDim / 16; mt += kWarps) {
    wm::FragC acc[kDim / 8];
    zero_tiles<kDim>(acc);
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      wm::FragA x;
      wm::load_a_trans(x, xs, S::ld, 16 * ks, 16 * mt);
      multiply_add_tiles<kDim, true>(acc, x, ws, 16 * ks);
    }
#pragma unroll
    for (int t = 0; t < kDim / 8; ++t)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * mt + wm::c_row(lane, 2 * half), col = 8 * t + wm::c_col(lane, 0);
        *reinterpret_cast<float2*>(local + row * kDim + col) = make_float2(acc[t].r[2 * half], acc[t].r[2 * half + 1]);
      }
  }
  for (int c = threadIdx.x; c < kDim; c += kThreads) {
    float z = 0.0f;
    for (int r = 0; r < kC; ++r) z += weights[r] * mma::to_float(xs[r * S::ld + c]);
    local[kDim * kDim + c] = z;
  }
}

// Launch 2 (causal): per state element, the exclusive prefix (forward) or suffix (reverse) over
// chunks of the local states: the state in bf16, the vector in f32.
template <bool kReverse>
__global__ void prefix_kernel(const float* local, bf16* state, float* z, int64_t slices, int64_t chunks, int dim) {
  const int64_t per = static_cast<int64_t>(dim) * (dim + 1), square = static_cast<int64_t>(dim) * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < slices * per;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slice = i / per, el = i % per;
    float run = 0.0f;
    for (int64_t s = 0; s < chunks; ++s) {
      const int64_t c = kReverse ? chunks - 1 - s : s, sc = slice * chunks + c;
      const float x = local[sc * per + el];
      if (el < square)
        state[sc * square + el] = mma::to_bf16(run);
      else
        z[sc * dim + (el - square)] = run;
      run += x;
    }
  }
}

// Launch 2 (bidirectional and cross-attention): per state element, the sum of the first `count`
// chunks' local states, into the slice's first slot (the state every query reads).
__global__ void total_kernel(const float* local, bf16* state, float* z, int64_t slices, int64_t chunks, int64_t count,
                             int dim) {
  const int64_t per = static_cast<int64_t>(dim) * (dim + 1), square = static_cast<int64_t>(dim) * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < slices * per;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slice = i / per, el = i % per;
    float sum = 0.0f;
    for (int64_t c = 0; c < count; ++c) sum += local[(slice * chunks + c) * per + el];
    if (el < square)
      state[slice * chunks * square + el] = mma::to_bf16(sum);
    else
      z[slice * chunks * dim + (el - square)] = sum;
  }
}

// The state slot a chunk's queries read: its own prefix (causal) or the slice's total.
template <bool kCausal>
__device__ __forceinline__ int64_t state_slot(const Args& a, int64_t slice, int64_t chunk) {
  return slice * a.chunks + (kCausal ? chunk : 0);
}

// ---------------------------------------------------------------------------------------------
// Launch 3, forward: out and den of one chunk of queries. Without the causal mask there are no
// scores: every query reads the total state.
template <int kDim, bool kCausal>
__global__ void __launch_bounds__(kThreads) output_kernel(Args a) {
  TARN_DYNAMIC_SHARED(unsigned char, smem);
  using S = Shape<kDim>;
  bf16* qs = row_buffer<kDim>(smem, 0);
  bf16* ks = row_buffer<kDim>(smem, 1);
  bf16* vs = row_buffer<kDim>(smem, 2);
  bf16* ss = row_buffer<kDim>(smem, 3);
  float* zs = reinterpret_cast<float*>(smem + 3 * S::rows_bytes + S::state_bytes);
  const int64_t slice = blockIdx.y, chunk = blockIdx.x, row0 = chunk * kC, at = slice * a.n;
  const int64_t sc = state_slot<kCausal>(a, slice, chunk);
  if (kCausal)
    load_chunk_qkv<kDim>(smem, a, slice, row0);
  else
    load_rows<kDim>(qs, a.q + at * a.d, row0, a.n, a.d);
  load_state<kDim>(ss, a.state + sc * kDim * kDim);
  // z as the state's bf16 (num's phi(Q) S multiplies bf16 S: den must weigh alike, or out stops
  // being a weighted mean of v and the backward's (dO . v_j - dO . out) loses its cancellation).
  for (int c = threadIdx.x; c < kDim; c += kThreads) zs[c] = round_bf16(a.z[sc * kDim + c]);
  async::wait_all();
  __syncthreads();
  map_chunk_qk<kDim>(smem, a, slice, row0);
  __syncthreads();

  const int w = threadIdx.x / device::kWarp, lane = wm::lane_id();
  wm::FragA qa[kDim / 16];
  load_row_fragments<kDim>(qa, qs, w);
  wm::FragC p[8];
  float den[2] = {0.0f, 0.0f};
  if constexpr (kCausal) {
    chunk_scores<kDim, true>(p, qa, ks, w);
    mask_diagonal<true>(p, w);
    // den: the masked scores' row sums plus phi(q) . z, for rows g and g + 8 of the warp's 16,
    // summing the scores as P V will multiply them: rounded to bf16.
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
      for (int el = 0; el < 4; ++el) p[t].r[el] = round_bf16(p[t].r[el]);
#pragma unroll
    for (int t = 0; t < 8; ++t) den[0] += p[t].r[0] + p[t].r[1], den[1] += p[t].r[2] + p[t].r[3];
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bf16* qrow = qs + (16 * w + wm::c_row(lane, 2 * half)) * S::ld;
    for (int c = lane % 4; c < kDim; c += 4) den[half] += mma::to_float(qrow[c]) * zs[c];
    den[half] = quad_sum(den[half]);
  }
  wm::FragC o[kDim / 8];
  zero_tiles<kDim>(o);
  if constexpr (kCausal) scores_times<kDim, true>(o, p, vs, w);
#pragma unroll
  for (int ks2 = 0; ks2 < kDim / 16; ++ks2) multiply_add_tiles<kDim, true>(o, qa[ks2], ss, 16 * ks2);

  // (Two scalars, not an array indexed by the row: that would put it on the stack.)
  const float inv0 = 1.0f / (den[0] + a.eps), inv1 = 1.0f / (den[1] + a.eps);
  const int64_t base = row0 + 16 * w;
  store_tiles<kDim>(a.out_w + at * a.e, o, row0, a.n, a.e, w, [&](int64_t row, int, float x) {
    return x * (row - base >= 8 ? inv1 : inv0);
  });
  if (lane % 4 == 0)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = base + wm::c_row(lane, 2 * half);
      if (row < a.n) a.den_w[at + row] = den[half];
    }
}

// ---------------------------------------------------------------------------------------------
// Launch 3, backward: dq of one chunk of queries and dk, dv of one chunk of keys (each skipped
// when null; without the causal mask, chunk c's queries and keys are unrelated rows, and a
// chunk past the end of one sequence finds zero rows there and writes nothing).
template <int kDim, bool kCausal>
__global__ void __launch_bounds__(kThreads) gradient_kernel(Args a) {
  TARN_DYNAMIC_SHARED(unsigned char, smem);
  using S = Shape<kDim>;
  bf16* qs = row_buffer<kDim>(smem, 0);
  bf16* ks = row_buffer<kDim>(smem, 1);
  bf16* vs = row_buffer<kDim>(smem, 2);
  bf16* gs = row_buffer<kDim>(smem, 3);
  bf16* os = row_buffer<kDim>(smem, 4);
  bf16* ss = row_buffer<kDim>(smem, 5);
  bf16* dss = reinterpret_cast<bf16*>(smem + 5 * S::rows_bytes + S::state_bytes);
  float* zs = reinterpret_cast<float*>(smem + 5 * S::rows_bytes + 2 * S::state_bytes);
  float* dzs = zs + kDim;
  float* gn = dzs + kDim;
  const int64_t slice = blockIdx.y, chunk = blockIdx.x, row0 = chunk * kC, at = slice * a.n;
  const int64_t at_k = slice * a.n_k, sc = state_slot<kCausal>(a, slice, chunk);
  const float* row_pad = padding_of(a, slice);
  load_chunk_qkv<kDim>(smem, a, slice, row0);
  load_rows<kDim>(gs, a.dout + at * a.e, row0, a.n, a.e);
  load_rows<kDim>(os, a.out + at * a.e, row0, a.n, a.e);
  load_state<kDim>(ss, a.state + sc * kDim * kDim);
  load_state<kDim>(dss, a.dstate + sc * kDim * kDim);
  // (Both vectors as bf16, as the states beside them: the forward's den used this z.)
  for (int c = threadIdx.x; c < kDim; c += kThreads)
    zs[c] = round_bf16(a.z[sc * kDim + c]), dzs[c] = round_bf16(a.dz[sc * kDim + c]);
  async::wait_all();
  __syncthreads();
  map_chunk_qk<kDim>(smem, a, slice, row0);
  gradient_rows<kDim>(gs, os, gn, a.den + at, row0, a.n, a.e, a.eps);
  __syncthreads();

  const int w = threadIdx.x / device::kWarp, lane = wm::lane_id();
  const int64_t base = row0 + 16 * w;
  const float gn0 = gn[16 * w + wm::c_row(lane, 0)], gn1 = gn[16 * w + wm::c_row(lane, 2)];  // rows g, g + 8
  [[maybe_unused]] wm::FragC p[8];  // the scores, causal only
  wm::FragC acc[kDim / 8];

  if (a.dq) {  // dphi(Q) = D phi(K) + G_v S^T + g_n z^T, rows: the warp's queries
    wm::FragA ga[kDim / 16];
    load_row_fragments<kDim>(ga, gs, w);
    zero_tiles<kDim>(acc);
    if constexpr (kCausal) {
      chunk_scores<kDim, true>(p, ga, vs, w);
#pragma unroll
      for (int pp = 0; pp < kWarps; ++pp) {
        if (pp > w) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int el = 0; el < 4; ++el) p[2 * pp + h].r[el] += el < 2 ? gn0 : gn1;
      }
      mask_diagonal<true>(p, w);
      scores_times<kDim, true>(acc, p, ks, w);
    }
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) multiply_add_tiles<kDim, false>(acc, ga[kk], ss, 16 * kk);
    const bf16* q_raw = a.q + at * a.d;
    store_tiles<kDim>(a.dq + at * a.d, acc, row0, a.n, a.d, w, [&](int64_t row, int col, float x) {
      const float g = x + (row - base >= 8 ? gn1 : gn0) * zs[col];
      return g * fmap::dphi_elementwise(a.fm, mma::to_float(q_raw[row * a.d + col]));
    });
  }
  if (a.dv) {  // dV = P^T G_v + phi(K) dS, rows: the warp's keys
    wm::FragA ka[kDim / 16];
    load_row_fragments<kDim>(ka, ks, w);
    zero_tiles<kDim>(acc);
    if constexpr (kCausal) {
      chunk_scores<kDim, false>(p, ka, qs, w);
      mask_diagonal<false>(p, w);
      scores_times<kDim, false>(acc, p, gs, w);
    }
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) multiply_add_tiles<kDim, true>(acc, ka[kk], dss, 16 * kk);
    store_tiles<kDim>(a.dv + at_k * a.e, acc, row0, a.n_k, a.e, w, [](int64_t, int, float x) { return x; });
  }
  if (a.dk) {  // dphi(K) = D^T phi(Q) + V dS^T + 1 dz^T, rows: the warp's keys
    wm::FragA va[kDim / 16];
    load_row_fragments<kDim>(va, vs, w);
    zero_tiles<kDim>(acc);
    if constexpr (kCausal) {
      chunk_scores<kDim, false>(p, va, gs, w);
#pragma unroll
      for (int pp = 0; pp < kWarps; ++pp) {
        if (pp < w) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int el = 0; el < 4; ++el) p[2 * pp + h].r[el] += gn[16 * pp + 8 * h + wm::c_col(lane, el)];
      }
      mask_diagonal<false>(p, w);
      scores_times<kDim, false>(acc, p, qs, w);
    }
#pragma unroll
    for (int kk = 0; kk < kDim / 16; ++kk) multiply_add_tiles<kDim, false>(acc, va[kk], dss, 16 * kk);
    const bf16* k_raw = a.k + at_k * a.d;
    store_tiles<kDim>(a.dk + at_k * a.d, acc, row0, a.n_k, a.d, w, [&](int64_t row, int col, float x) {
      if (row_pad && row_pad[row] != 0.0f) return 0.0f;
      return (x + dzs[col]) * fmap::dphi_elementwise(a.fm, mma::to_float(k_raw[row * a.d + col]));
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

int dim_for(const cpu::LinearAttentionDims& dims) {
  const int64_t widest = std::max(dims.d, dims.e);
  return widest <= 32 ? 32 : widest <= 64 ? 64 : 128;
}

struct Layout {
  int dim;
  bool causal;
  int64_t slices, chunks;          // chunks: slots per slice, the more of query and key chunks
  int64_t query_chunks, key_chunks;
  size_t local, state, dstate, z, dz, total;  // offsets in floats
};

Layout layout_of(const cpu::LinearAttentionDims& dims, bool causal) {
  Layout l{};
  l.dim = dim_for(dims);
  l.causal = causal;
  l.slices = dims.batch * dims.heads;
  l.query_chunks = (dims.n_q + kC - 1) / kC;
  l.key_chunks = (dims.n_k + kC - 1) / kC;
  l.chunks = std::max(l.query_chunks, l.key_chunks);
  const size_t units = static_cast<size_t>(l.slices * l.chunks), dim = static_cast<size_t>(l.dim);
  const size_t state_floats = units * dim * dim / 2;  // bf16
  l.local = 0;
  l.state = l.local + units * dim * (dim + 1);
  l.dstate = l.state + state_floats;
  l.z = l.dstate + state_floats;
  l.dz = l.z + units * dim;
  l.total = l.dz + units * dim;
  return l;
}

Args args_of(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, const Layout& l,
             float* workspace) {
  Args a{};
  a.pad = cfg.key_padding_mask;
  a.local = workspace + l.local;
  a.state = reinterpret_cast<bf16*>(workspace + l.state);
  a.dstate = reinterpret_cast<bf16*>(workspace + l.dstate);
  a.z = workspace + l.z;
  a.dz = workspace + l.dz;
  a.n = dims.n_q;
  a.n_k = dims.n_k;
  a.heads = dims.heads;
  a.chunks = l.chunks;
  a.d = static_cast<int>(dims.d);
  a.e = static_cast<int>(dims.e);
  a.fm = cfg.feature_map;
  a.eps = cfg.eps;
  return a;
}

// `chunks` blocks per slice.
template <typename Kernel>
void launch_chunks(Kernel kernel, const Layout& l, int64_t chunks, size_t smem, const Args& a) {
  if (chunks == 0) return;
  device::allow_dynamic_smem(kernel, smem);
  tarn::launch(kernel, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(l.slices)), dim3(kThreads), smem,
               nullptr, a);
}

// The local states of the key chunks (forward) or of the query chunks (kGrad), then what the
// queries read of them: their prefix (causal; the gradients' suffix) or their total.
template <int kDim, bool kGrad>
void states(const Layout& l, const Args& a) {
  using S = Shape<kDim>;
  const int64_t chunks = kGrad ? l.query_chunks : l.key_chunks;
  launch_chunks(local_state_kernel<kDim, kGrad>, l, chunks, (kGrad ? 3 : 2) * S::rows_bytes + sizeof(float) * kC, a);
  bf16* state = kGrad ? a.dstate : a.state;
  float* z = kGrad ? a.dz : a.z;
  const int64_t n = l.slices * l.dim * (l.dim + 1);
  if (!l.causal)
    tarn::launch(total_kernel, device::grid_for(n), device::kBlock, 0, nullptr, a.local, state, z, l.slices, l.chunks,
                 chunks, l.dim);
  else
    tarn::launch(kGrad ? prefix_kernel<true> : prefix_kernel<false>, device::grid_for(n), device::kBlock, 0, nullptr,
                 a.local, state, z, l.slices, l.chunks, l.dim);
}

template <int kDim, bool kCausal>
void run_forward(const Layout& l, const Args& a) {
  using S = Shape<kDim>;
  states<kDim, false>(l, a);
  launch_chunks(output_kernel<kDim, kCausal>, l, l.query_chunks,
                3 * S::rows_bytes + S::state_bytes + sizeof(float) * kDim, a);
}

template <int kDim, bool kCausal>
void run_backward(const Layout& l, const Args& a) {
  using S = Shape<kDim>;
  states<kDim, false>(l, a);
  states<kDim, true>(l, a);
  launch_chunks(gradient_kernel<kDim, kCausal>, l, l.chunks,
                5 * S::rows_bytes + 2 * S::state_bytes + sizeof(float) * (2 * kDim + kC), a);
}

// run(l, a) for the layout's width and form.
template <template <int, bool> class Run>
void dispatch(const Layout& l, const Args& a) {
  switch (l.dim * 2 + (l.causal ? 1 : 0)) {
    case 64: Run<32, false>::go(l, a); break;
    case 65: Run<32, true>::go(l, a); break;
    case 128: Run<64, false>::go(l, a); break;
    case 129: Run<64, true>::go(l, a); break;
    case 256: Run<128, false>::go(l, a); break;
    default: Run<128, true>::go(l, a); break;
  }
}
template <int kDim, bool kCausal>
struct Forward {
  static void go(const Layout& l, const Args& a) { run_forward<kDim, kCausal>(l, a); }
};
template <int kDim, bool kCausal>
struct Backward {
  static void go(const Layout& l, const Args& a) { run_backward<kDim, kCausal>(l, a); }
};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace

void set_enabled(bool on) { enabled().store(on); }

bool supported(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg,
               std::initializer_list<const void*> pointers) {
  if (!enabled().load() || !fmap::is_elementwise(cfg.feature_map)) return false;
  if (dims.d % 8 != 0 || dims.e % 8 != 0 || dims.d > kMaxDim || dims.e > kMaxDim) return false;
  if (dims.batch * dims.heads > device::kMaxGridY) return false;
  for (const void* p : pointers)
    if (p && !aligned16(p)) return false;
  return true;
}

// (The same for both forms: the slots are the more of query and key chunks either way.)
size_t workspace_floats(const cpu::LinearAttentionDims& dims) { return layout_of(dims, true).total; }

void forward(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, const ::tarn::bf16* q,
             const ::tarn::bf16* k, const ::tarn::bf16* v, ::tarn::bf16* out, float* den, float* workspace) {
  const Layout l = layout_of(dims, cfg.causal);
  if (l.slices == 0 || l.query_chunks == 0) return;
  Args a = args_of(dims, cfg, l, workspace);
  a.q = reinterpret_cast<const bf16*>(q);
  a.k = reinterpret_cast<const bf16*>(k);
  a.v = reinterpret_cast<const bf16*>(v);
  a.out_w = reinterpret_cast<bf16*>(out);
  a.den_w = den;
  dispatch<Forward>(l, a);
}

void backward(const cpu::LinearAttentionDims& dims, const cpu::LinearAttentionConfig& cfg, const ::tarn::bf16* q,
              const ::tarn::bf16* k, const ::tarn::bf16* v, const ::tarn::bf16* out, const float* den,
              const ::tarn::bf16* dout, ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* workspace) {
  const Layout l = layout_of(dims, cfg.causal);
  if (l.slices == 0 || l.chunks == 0) return;
  Args a = args_of(dims, cfg, l, workspace);
  a.q = reinterpret_cast<const bf16*>(q);
  a.k = reinterpret_cast<const bf16*>(k);
  a.v = reinterpret_cast<const bf16*>(v);
  a.out = reinterpret_cast<const bf16*>(out);
  a.dout = reinterpret_cast<const bf16*>(dout);
  a.den = den;
  a.dq = reinterpret_cast<bf16*>(dq);
  a.dk = reinterpret_cast<bf16*>(dk);
  a.dv = reinterpret_cast<bf16*>(dv);
  dispatch<Backward>(l, a);
}

}  // namespace chunked_bf16
}  // namespace tarn::kernels::TARN_CUDA_NS
