// The gated delta rule's scan in chunked form (kernels/cuda/delta_rule_chunked.cuh): the WY/UT
// representation of DeltaNet's chunkwise algorithm (Yang et al., NeurIPS 2024), with Gated
// DeltaNet's decay (Yang, Kautz & Hatamizadeh, ICLR 2025), in kernels/delta_rule.h's conventions.
//
// A sub-chunk of L tokens t = 0..L-1 (scan order) starts from the state S0 (dk x dv). With
//   D_ts = prod_{s < r <= t} alpha_r   for -1 <= s <= t (D_tt = 1; D_{t,-1} = b_t, the decay
//                                     since the sub-chunk's start; e_s = D_{L-1,s})
// the recurrence S_t = alpha_t S_{t-1} + k_t w_t^T, w_t = beta_t (v_t - alpha_t S_{t-1}^T k_t),
// unrolls to S_t = b_t S0 + sum_{s <= t} D_ts k_s w_s^T, so the writes W (rows w_t) solve
//   (I + A) W = diag(beta) R,  A_ts = beta_t D_ts (k_t . k_s) for s < t (0 elsewhere),
//                              R = V - diag(b) K S0
// i.e. W = X R with X = (I + A)^-1 diag(beta), lower triangular (forward substitution, a
// column a thread). Then
//   out = diag(b) Q S0 + P W,       P_ts = D_ts (q_t . k_s) for s <= t
//   S_L = b_{L-1} S0 + K^T diag(e) W.
// Without the erase (kind gated) A = 0 and R = V. Everything but the substitution is a matrix
// product over the sub-chunk, which the block's threads share.
//
// The backward runs the sub-chunks in reverse with dS = dL/dS_L (from the later sub-chunks, or
// d_final_state):
//   dW  = P^T dout + diag(e) K dS                    dY solves (I + A)^T dY = dW (back substitution)
//   dV  = dR = diag(beta) dY                         dA_ts = -dY_t . w_s (s < t), dP_ts = dout_t . w_s
//   dq  = diag(b) dout S0^T + (D o dP) K
//   dk  = (D o dP)^T Q + (dKK + dKK^T) K - diag(b beta) dY S0^T + diag(e) W dS^T,   dKK = diag(beta) (D o dA)
//   dbeta_t = r_t . dY_t + sum_s dA_ts D_ts (k_t . k_s)
//   dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY
// and every decay enters through D: with G = dL/dD (G_ts from A and P; G_{t,-1} = dL/db_t; e's
// and b_{L-1}'s gradients added to row L-1), since D_ts = D_tr alpha_r D_{r-1,s} for s < r <= t,
//   d alpha_r = sum_{t >= r} D_tr sum_{-1 <= s < r} G_ts D_{r-1,s}     (D_{-1,-1} = 1)
// which needs no division by alpha (alpha may be 0).
//
// Work split. Given X, A and P (which need no state), every column of the state evolves on its
// own, so the passes that must walk the sub-chunks in order run a block per (slice, tile of
// kColumnTile state columns); the work that sums over columns runs a block per (slice,
// sub-chunk), all sub-chunks at once. Forward: one kernel, a block per (slice, column tile), each
// computing its sub-chunks' D, A, X and P itself (the same bits in every tile) and its columns
// of W, out and the state. Backward, three kernels:
//   1. states (only when a checkpoint's chunk has several sub-chunks): a block per (slice,
//      column tile, chunk) runs its chunk forward from the checkpoint and keeps the state before
//      each later sub-chunk in the workspace;
//   2. state gradients: a block per (slice, column tile) walks the sub-chunks in reverse from
//      d_final_state and keeps dS, the gradient of the state after each sub-chunk: dW, the back
//      substitution and dS0 are column by column too;
//   3. a block per (slice, sub-chunk), all at once, from that sub-chunk's S0 and dS: dq, dk, dv,
//      dbeta and dalpha, whose sums span columns.
// Every element is summed by one thread in a fixed order, and each pass computes an element in
// the order the single-block kernels did, so results are the same bits on every run and the
// same as theirs. Shared memory: the sub-chunk (at most 32 tokens) and the state or its tile
// (kernel 3: 141 KiB at C = 32, dk = dv = 64; the tiled kernels about half that; all opt in
// above 48 KiB). The workspace holds two states per sub-chunk of the sequence (S0 and dS):
// 2 n / C states a slice, linear in n, as the checkpoints are.
#include "kernels/cuda/delta_rule_chunked.cuh"

#include <algorithm>

#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/delta_rule_chunked_common.cuh"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using delta_chunked::alpha_gradients;
using delta_chunked::SubChunks;
using delta_chunked::sub_chunks;
using delta_chunked::Workspace;
using delta_chunked::workspace_of;

using cpu::DeltaRuleConfig;
using cpu::DeltaRuleDims;

constexpr int kThreads = 256;
constexpr int64_t kSubChunks[] = {32, 16, 8};  // tried in turn: the largest whose shared memory fits
constexpr int64_t kColumnTile = 16;            // state columns a block of the in-order passes owns

// Offsets (floats) of the buffers in dynamic shared memory, for sub-chunks of at most c tokens
// and `cols` state columns (dv for a whole state, a tile's width in the tiled kernels). The
// forward's buffers come first: it takes only `forward_total` floats.
struct Layout {
  int64_t c;                                              // row stride of the c x c buffers
  int64_t s0, k, q, r, w, d, x, a, qk, beta, alpha;       // forward (qk holds P there)
  int64_t forward_total;
  int64_t ds, dout, dy, ks0, qs0, kdsw, g, kk, da, dkk, dqk, de;  // backward
  int64_t total;
};

__host__ __device__ inline Layout layout(int64_t c, int64_t dk, int64_t cols) {
  Layout l{};
  const int64_t state = dk * cols, ck = c * dk, cv = c * cols, cc = c * c, cd = c * (c + 1);
  l.c = c;
  l.s0 = 0;
  l.k = l.s0 + state;
  l.q = l.k + ck;
  l.r = l.q + ck;
  l.w = l.r + cv;
  l.d = l.w + cv;
  l.x = l.d + cd;
  l.a = l.x + cc;
  l.qk = l.a + cc;
  l.beta = l.qk + cc;
  l.alpha = l.beta + c;
  l.forward_total = l.alpha + c;
  l.ds = l.forward_total;
  l.dout = l.ds + state;
  l.dy = l.dout + cv;
  l.ks0 = l.dy + cv;
  l.qs0 = l.ks0 + cv;
  l.kdsw = l.qs0 + cv;
  l.g = l.kdsw + cv;
  l.kk = l.g + cd;
  l.da = l.kk + cc;
  l.dkk = l.da + cc;
  l.dqk = l.dkk + cc;
  l.de = l.dqk + cc;
  l.total = l.de + c;
  return l;
}

__host__ __device__ inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// One slice's inputs and the state columns j0 .. j0 + cols - 1 a block owns (all dv of them
// outside the tiled kernels); row(t) is the row of scan position t.
struct Slice {
  const float *q, *k, *v, *beta, *alpha;  // q null: no readout
  int64_t b, n, dk, dv;                   // dv: the width of v's and out's rows, and of a state's
  int64_t j0, cols;
  bool reverse, erase;
  __device__ int64_t row(int64_t t) const { return b * n + (reverse ? n - 1 - t : t); }
};

// Column tile `tile` of a state of dv columns.
__host__ __device__ inline int64_t tile_width(int64_t dv, int64_t tile) {
  return smaller(kColumnTile, dv - tile * kColumnTile);
}
__host__ __device__ inline int64_t column_tiles(int64_t dv) { return (dv + kColumnTile - 1) / kColumnTile; }

// The shared buffers of a block, as pointers.
struct Smem {
  Layout l;
  float *s0, *k, *q, *r, *w, *d, *x, *a, *qk, *beta, *alpha;
  float *ds, *dout, *dy, *ks0, *qs0, *kdsw, *g, *kk, *da, *dkk, *dqk, *de;
  __device__ Smem(float* base, const Layout& lay, bool backward) : l(lay) {
    s0 = base + l.s0, k = base + l.k, q = base + l.q, r = base + l.r, w = base + l.w, d = base + l.d;
    x = base + l.x, a = base + l.a, qk = base + l.qk, beta = base + l.beta, alpha = base + l.alpha;
    float* none = nullptr;
    ds = backward ? base + l.ds : none, dout = backward ? base + l.dout : none, dy = backward ? base + l.dy : none;
    ks0 = backward ? base + l.ks0 : none, qs0 = backward ? base + l.qs0 : none;
    kdsw = backward ? base + l.kdsw : none, g = backward ? base + l.g : none, kk = backward ? base + l.kk : none;
    da = backward ? base + l.da : none, dkk = backward ? base + l.dkk : none, dqk = backward ? base + l.dqk : none;
    de = backward ? base + l.de : none;
  }
  // D_ts for -1 <= s <= t (and 0 above the diagonal); G alike.
  __device__ float& D(int64_t t, int64_t s) const { return d[t * (l.c + 1) + s + 1]; }
  __device__ float& G(int64_t t, int64_t s) const { return g[t * (l.c + 1) + s + 1]; }
  __device__ float& at(float* m, int64_t t, int64_t s) const { return m[t * l.c + s]; }  // a c x c buffer
};

__device__ inline float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

// x . column j of the row-major (n x cols) matrix m.
__device__ inline float dot_column(const float* x, const float* m, int64_t cols, int64_t j, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * m[i * cols + j];
  return acc;
}

// Between a state in global memory (dk x dv, `from`/`to` at its first element; null: zero) and
// the block's columns of it in shared memory (dk x cols).
__device__ void load_state(float* tile, const float* from, const Slice& in) {
  for (int64_t e = threadIdx.x; e < in.dk * in.cols; e += blockDim.x)
    tile[e] = from != nullptr ? from[(e / in.cols) * in.dv + in.j0 + e % in.cols] : 0.0f;
}
__device__ void store_state(float* to, const float* tile, const Slice& in) {
  for (int64_t e = threadIdx.x; e < in.dk * in.cols; e += blockDim.x)
    to[(e / in.cols) * in.dv + in.j0 + e % in.cols] = tile[e];
}

// Loads the sub-chunk's k (and q when reading out), the block's columns of v into r, beta and
// alpha.
__device__ void load_rows(const Smem& m, const Slice& in, int64_t u0, int64_t L) {
  const int64_t dk = in.dk, cols = in.cols;
  for (int64_t e = threadIdx.x; e < L * dk; e += blockDim.x) {
    const int64_t t = e / dk, i = e % dk, row = in.row(u0 + t);
    m.k[e] = in.k[row * dk + i];
    if (in.q != nullptr) m.q[e] = in.q[row * dk + i];
  }
  for (int64_t e = threadIdx.x; e < L * cols; e += blockDim.x)
    m.r[e] = in.v[in.row(u0 + e / cols) * in.dv + in.j0 + e % cols];
  for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
    m.beta[t] = in.beta[in.row(u0 + t)];
    m.alpha[t] = in.alpha[in.row(u0 + t)];
  }
}

// The block's columns of d_out's rows into m.dout.
__device__ void load_d_out(const Smem& m, const Slice& in, int64_t u0, int64_t L, const float* d_out) {
  for (int64_t e = threadIdx.x; e < L * in.cols; e += blockDim.x)
    m.dout[e] = d_out[in.row(u0 + e / in.cols) * in.dv + in.j0 + e % in.cols];
}

// X = (I + A)^-1 diag(beta), a column a thread (X_tc = 0 for t < c).
__device__ void solve_writes(const Smem& m, int64_t L, bool erase) {
  for (int64_t c = threadIdx.x; c < L; c += blockDim.x) {
    for (int64_t t = 0; t < L; ++t) {
      float x = t == c ? m.beta[t] : 0.0f;
      if (erase && t > c)
        for (int64_t s = c; s < t; ++s) x -= m.at(m.a, t, s) * m.at(m.x, s, c);
      m.at(m.x, t, c) = t < c ? 0.0f : x;
    }
  }
}

// W = X R (rows t, sums over s <= t).
__device__ void writes(const Smem& m, int64_t L, int64_t cols) {
  for (int64_t e = threadIdx.x; e < L * cols; e += blockDim.x) {
    const int64_t t = e / cols, j = e % cols;
    float acc = 0.0f;
    for (int64_t s = 0; s <= t; ++s) acc += m.at(m.x, t, s) * m.r[s * cols + j];
    m.w[e] = acc;
  }
}

// S <- b_{L-1} S + K^T diag(e) W, in place in m.s0.
__device__ void advance_state(const Smem& m, int64_t L, int64_t dk, int64_t cols) {
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < dk * cols; e += blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    float acc = 0.0f;
    for (int64_t s = 0; s < L; ++s) acc += m.D(L - 1, s) * m.k[s * dk + i] * m.w[s * cols + j];
    m.s0[e] = decay * m.s0[e] + acc;
  }
}

// One sub-chunk forward from the block's columns of the state in m.s0, which it advances; their
// columns of out's rows when in.q. Starts and ends with every thread past a barrier.
__device__ void forward_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, float* out) {
  const int64_t dk = in.dk, cols = in.cols;
  load_rows(m, in, u0, L);
  __syncthreads();
  delta_chunked::decays(m, L);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int64_t t = e / L, s = e % L;
    if (in.erase) m.at(m.a, t, s) = s < t ? m.beta[t] * m.D(t, s) * dot(m.k + t * dk, m.k + s * dk, dk) : 0.0f;
    if (in.q != nullptr) m.at(m.qk, t, s) = s <= t ? m.D(t, s) * dot(m.q + t * dk, m.k + s * dk, dk) : 0.0f;
  }
  if (in.erase)  // R = V - diag(b) K S0
    for (int64_t e = threadIdx.x; e < L * cols; e += blockDim.x) {
      const int64_t t = e / cols, j = e % cols;
      m.r[e] -= m.D(t, -1) * dot_column(m.k + t * dk, m.s0, cols, j, dk);
    }
  __syncthreads();
  solve_writes(m, L, in.erase);
  __syncthreads();
  writes(m, L, cols);
  __syncthreads();
  if (in.q != nullptr) {  // out = diag(b) Q S0 + P W
    for (int64_t e = threadIdx.x; e < L * cols; e += blockDim.x) {
      const int64_t t = e / cols, j = e % cols;
      float acc = m.D(t, -1) * dot_column(m.q + t * dk, m.s0, cols, j, dk);
      for (int64_t s = 0; s <= t; ++s) acc += m.at(m.qk, t, s) * m.w[s * cols + j];
      out[in.row(u0 + t) * in.dv + in.j0 + j] = acc;
    }
    __syncthreads();  // S0 is read above and written below
  }
  advance_state(m, L, dk, cols);
  __syncthreads();
}

// The slice and column tile of a tiled kernel's block number `block` (slice-major).
__device__ Slice tiled_slice(int64_t block, const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const float* q,
                             const float* k, const float* v, const float* beta, const float* alpha) {
  const int64_t tiles = column_tiles(dims.dv), b = block / tiles, tile = block % tiles;
  return {q, k, v, beta, alpha, b, dims.n, dims.dk, dims.dv, tile * kColumnTile, tile_width(dims.dv, tile),
          cfg.reverse, cfg.erase};
}

// A block per (slice, column tile): the whole scan over its columns.
__global__ void __launch_bounds__(kThreads, 1)
    delta_rule_chunked_forward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const float* q,
                                      const float* k, const float* v, const float* beta, const float* alpha, float* out,
                                      float* final_state, float* checkpoints, int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(float, smem);
  const Slice in = tiled_slice(blockIdx.x, dims, cfg, q, k, v, beta, alpha);
  const Smem m(smem, layout(c, dims.dk, in.cols), false);
  const int64_t state = dims.dk * dims.dv, b = in.b;
  load_state(m.s0, nullptr, in);
  __syncthreads();
  for (int64_t t0 = 0; t0 < dims.n; t0 += cfg.chunk) {
    if (checkpoints != nullptr && t0 > 0)
      store_state(checkpoints + (b * per_slice_checkpoints + t0 / cfg.chunk - 1) * state, m.s0, in);
    const int64_t t1 = smaller(dims.n, t0 + cfg.chunk);
    for (int64_t u0 = t0; u0 < t1; u0 += c) forward_sub_chunk(m, in, u0, smaller(c, t1 - u0), out);
  }
  if (final_state != nullptr) store_state(final_state + b * state, m.s0, in);
}

// Backward kernel 1, a block per (slice, column tile, chunk) where a chunk has several sub-chunks:
// the state before each of its later sub-chunks, recomputed from the chunk's checkpoint.
__global__ void __launch_bounds__(kThreads)
    delta_rule_chunked_states_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const float* k,
                                     const float* v, const float* beta, const float* alpha, const float* checkpoints,
                                     float* workspace, int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(float, smem);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t ci = blockIdx.x % subs.chunks, state = dims.dk * dims.dv;
  const Slice in = tiled_slice(blockIdx.x / subs.chunks, dims, cfg, nullptr, k, v, beta, alpha);  // no readout
  const Smem m(smem, layout(c, dims.dk, in.cols), false);
  const Workspace ws = workspace_of(workspace, in.b, subs.slots, state);
  const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
  load_state(m.s0, ci == 0 ? nullptr : checkpoints + (in.b * per_slice_checkpoints + ci - 1) * state, in);
  __syncthreads();
  for (int64_t u = 1; t0 + u * c < t1; ++u) {
    forward_sub_chunk(m, in, t0 + (u - 1) * c, c, nullptr);
    store_state(ws.states + (ci * subs.per_chunk + u) * state, m.s0, in);
  }
}

// The backward's start on a sub-chunk: its rows (and d_out's, when reading out), then D. Ends
// past a barrier.
__device__ void load_for_backward(const Smem& m, const Slice& in, int64_t u0, int64_t L, const float* d_out) {
  load_rows(m, in, u0, L);
  if (in.q != nullptr) load_d_out(m, in, u0, L, d_out);
  __syncthreads();
  delta_chunked::decays(m, L);
  __syncthreads();
}

// The backward's pairs: A (erase; with keep_kk the k_t . k_s themselves into m.kk too) and
// q_t . k_s without D (readout). No barrier.
__device__ void backward_pairs(const Smem& m, const Slice& in, int64_t L, bool keep_kk) {
  const int64_t dk = in.dk;
  for (int64_t e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int64_t t = e / L, s = e % L;
    if (in.erase) {
      const float kk = s < t ? dot(m.k + t * dk, m.k + s * dk, dk) : 0.0f;
      if (keep_kk) m.at(m.kk, t, s) = kk;
      m.at(m.a, t, s) = m.beta[t] * m.D(t, s) * kk;
    }
    if (in.q != nullptr) m.at(m.qk, t, s) = s <= t ? dot(m.q + t * dk, m.k + s * dk, dk) : 0.0f;
  }
}

// dY for the block's columns: dW = P^T dout + diag(e) K dS into m.dy (and, with kdsw, (K dS) o W
// for e's gradient into m.kdsw), then with the erase (I + A)^T dY = dW, a column a thread from
// the last row up. Ends past a barrier.
__device__ void write_gradients(const Smem& m, const Slice& in, int64_t L, bool kdsw) {
  const int64_t dk = in.dk, cols = in.cols;
  for (int64_t e = threadIdx.x; e < L * cols; e += blockDim.x) {
    const int64_t s = e / cols, j = e % cols;
    const float kds = dot_column(m.k + s * dk, m.ds, cols, j, dk);
    float acc = m.D(L - 1, s) * kds;
    if (in.q != nullptr)
      for (int64_t t = s; t < L; ++t) acc += m.D(t, s) * m.at(m.qk, t, s) * m.dout[t * cols + j];
    m.dy[e] = acc;
    if (kdsw) m.kdsw[e] = kds * m.w[e];
  }
  __syncthreads();
  if (in.erase)
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      for (int64_t t = L - 1; t >= 0; --t) {
        float y = m.dy[t * cols + j];
        for (int64_t s = t + 1; s < L; ++s) y -= m.at(m.a, s, t) * m.dy[s * cols + j];
        m.dy[t * cols + j] = y;
      }
  __syncthreads();
}

// dS <- dS0 over one sub-chunk for the block's columns: m.ds holds the gradient of the state
// after the sub-chunk and ends holding the gradient of the state before it. The same
// arithmetic, element by element, as backward_sub_chunk's.
__device__ void state_gradient_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, const float* d_out) {
  const int64_t dk = in.dk, cols = in.cols;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_for_backward(m, in, u0, L, d_out);
  backward_pairs(m, in, L, false);
  __syncthreads();
  write_gradients(m, in, L, false);
  // dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY, in place.
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < dk * cols; e += blockDim.x) {
    const int64_t i = e / cols, j = e % cols;
    float acc = decay * m.ds[e];
    for (int64_t t = 0; t < L; ++t) {
      if (readout) acc += m.D(t, -1) * m.q[t * dk + i] * m.dout[t * cols + j];
      if (erase) acc -= m.D(t, -1) * m.beta[t] * m.k[t * dk + i] * m.dy[t * cols + j];
    }
    m.ds[e] = acc;
  }
  __syncthreads();
}

// Backward kernel 2, a block per (slice, column tile): the gradient of the state after each
// sub-chunk, walking them in reverse from d_final_state.
__global__ void __launch_bounds__(kThreads)
    delta_rule_chunked_state_gradients_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const float* q,
                                              const float* k, const float* v, const float* beta, const float* alpha,
                                              const float* d_out, const float* d_final_state, float* workspace) {
  TARN_DYNAMIC_SHARED(float, smem);
  const Slice in = tiled_slice(blockIdx.x, dims, cfg, q, k, v, beta, alpha);
  const Smem m(smem, layout(c, dims.dk, in.cols), true);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t state = dims.dk * dims.dv;
  const Workspace ws = workspace_of(workspace, in.b, subs.slots, state);
  load_state(m.ds, d_final_state != nullptr ? d_final_state + in.b * state : nullptr, in);
  for (int64_t ci = subs.chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
    for (int64_t u = (t1 - t0 + c - 1) / c - 1; u >= 0; --u) {
      __syncthreads();  // m.ds is written
      store_state(ws.grads + (ci * subs.per_chunk + u) * state, m.ds, in);
      if (ci == 0 && u == 0) break;  // the scan starts from zero: nothing reads dS before it
      const int64_t u0 = t0 + u * c;
      state_gradient_sub_chunk(m, in, u0, smaller(c, t1 - u0), d_out);
    }
  }
}

// The backward of one sub-chunk over the whole state (cols = dv): m.s0 holds its starting state
// and m.ds the gradient of the state after it.
__device__ void backward_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, const float* d_out, float* dq,
                                   float* dk_out, float* dv_out, float* d_beta, float* d_alpha) {
  const int64_t dk = in.dk, dv = in.dv, state = dk * dv;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_for_backward(m, in, u0, L, d_out);
  // Pairs: k_t . k_s and A (erase), q_t . k_s (readout); K S0 and Q S0.
  backward_pairs(m, in, L, true);
  for (int64_t e = threadIdx.x; e < L * dv; e += blockDim.x) {
    const int64_t t = e / dv, j = e % dv;
    if (erase) m.ks0[e] = dot_column(m.k + t * dk, m.s0, dv, j, dk);
    if (readout) m.qs0[e] = dot_column(m.q + t * dk, m.s0, dv, j, dk);
  }
  __syncthreads();
  if (erase)
    for (int64_t e = threadIdx.x; e < L * dv; e += blockDim.x) m.r[e] -= m.D(e / dv, -1) * m.ks0[e];
  solve_writes(m, L, erase);
  __syncthreads();
  writes(m, L, dv);
  __syncthreads();
  write_gradients(m, in, L, true);
  // dA, dP and what they give: dKK, dQK and G_ts for 0 <= s < t.
  for (int64_t e = threadIdx.x; e < L * L; e += blockDim.x) {
    const int64_t t = e / L, s = e % L;
    float g = 0.0f;
    if (erase) {
      float da = 0.0f;
      if (s < t)
        for (int64_t j = 0; j < dv; ++j) da -= m.dy[t * dv + j] * m.w[s * dv + j];
      m.at(m.da, t, s) = da;
      m.at(m.dkk, t, s) = da * m.beta[t] * m.D(t, s);
      g += da * m.beta[t] * m.at(m.kk, t, s);
    }
    if (readout) {
      const float dp = s <= t ? dot(m.dout + t * dv, m.w + s * dv, dv) : 0.0f;
      m.at(m.dqk, t, s) = dp * m.D(t, s);
      if (s < t) g += dp * m.at(m.qk, t, s);
    }
    m.G(t, s) = s < t ? g : 0.0f;
  }
  __syncthreads();
  // Rows: dq, dk, dv, dbeta, db_t (into G's column -1), de_s; and <S0, dS>.
  for (int64_t e = threadIdx.x; e < L * dk; e += blockDim.x) {
    const int64_t t = e / dk, i = e % dk, row = in.row(u0 + t);
    if (readout) {
      float acc = m.D(t, -1) * dot(m.dout + t * dv, m.s0 + i * dv, dv);
      for (int64_t s = 0; s <= t; ++s) acc += m.at(m.dqk, t, s) * m.k[s * dk + i];
      dq[row * dk + i] = acc;
    }
    // Token t as a key (index s in the formulas).
    float acc = m.D(L - 1, t) * dot(m.w + t * dv, m.ds + i * dv, dv);
    if (readout)
      for (int64_t r = t; r < L; ++r) acc += m.at(m.dqk, r, t) * m.q[r * dk + i];
    if (erase) {
      for (int64_t r = 0; r < L; ++r) acc += (m.at(m.dkk, r, t) + m.at(m.dkk, t, r)) * m.k[r * dk + i];
      acc -= m.D(t, -1) * m.beta[t] * dot(m.dy + t * dv, m.s0 + i * dv, dv);
    }
    dk_out[row * dk + i] = acc;
  }
  for (int64_t e = threadIdx.x; e < L * dv; e += blockDim.x)
    dv_out[in.row(u0 + e / dv) * dv + e % dv] = m.beta[e / dv] * m.dy[e];
  for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
    float db = 0.0f, dbeta = dot(m.r + t * dv, m.dy + t * dv, dv), de = 0.0f;
    if (readout) db += dot(m.qs0 + t * dv, m.dout + t * dv, dv);
    if (erase) {
      db -= m.beta[t] * dot(m.ks0 + t * dv, m.dy + t * dv, dv);
      for (int64_t s = 0; s < t; ++s) dbeta += m.at(m.da, t, s) * m.D(t, s) * m.at(m.kk, t, s);
    }
    for (int64_t j = 0; j < dv; ++j) de += m.kdsw[t * dv + j];
    m.G(t, -1) = db;
    m.de[t] = de;
    d_beta[in.row(u0 + t)] = dbeta;
  }
  float part = 0.0f;
  for (int64_t e = threadIdx.x; e < state; e += blockDim.x) part += m.s0[e] * m.ds[e];
  const float d_last = device::block_sum(part);  // ends past a barrier: the rows above are in
  // e_s = D_{L-1,s} (s < L - 1) and b_{L-1} = D_{L-1,-1} join G's last row.
  alpha_gradients(m, in, u0, L, d_last, d_alpha);
}

// Backward kernel 3, a block per (slice, sub-chunk slot), every sub-chunk at once.
__global__ void __launch_bounds__(kThreads)
    delta_rule_chunked_backward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const float* q,
                                       const float* k, const float* v, const float* beta, const float* alpha,
                                       const float* checkpoints, const float* d_out, float* dq, float* dk_out,
                                       float* dv_out, float* d_beta, float* d_alpha, float* workspace,
                                       int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(float, smem);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t b = blockIdx.x / subs.slots, slot = blockIdx.x % subs.slots;
  const int64_t ci = slot / subs.per_chunk, u = slot % subs.per_chunk;
  const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk), u0 = t0 + u * c;
  if (u0 >= t1) return;  // an empty slot of the last chunk: the whole block leaves
  const Smem m(smem, layout(c, dims.dk, dims.dv), true);
  const Slice in{q, k, v, beta, alpha, b, dims.n, dims.dk, dims.dv, 0, dims.dv, cfg.reverse, cfg.erase};
  const int64_t state = dims.dk * dims.dv;
  const Workspace ws = workspace_of(workspace, b, subs.slots, state);  // read only here
  const float* s0 = u > 0 ? ws.states + slot * state
                          : ci == 0 ? nullptr : checkpoints + (b * per_slice_checkpoints + ci - 1) * state;
  load_state(m.s0, s0, in);
  load_state(m.ds, ws.grads + slot * state, in);
  // load_rows' barrier in backward_sub_chunk orders these loads before their first use.
  backward_sub_chunk(m, in, u0, smaller(c, t1 - u0), d_out, dq, dk_out, dv_out, d_beta, d_alpha);
}

// A grid of `count` blocks, which must fit one dimension of it.
unsigned grid_of(int64_t count, const char* kernel) {
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  TARN_CHECK(count <= kMaxGridX, "delta_rule chunked ", kernel, ": ", count, " blocks exceed one grid");
  return static_cast<unsigned>(count);
}

}  // namespace

namespace delta_chunked {

int64_t sub_chunk(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const size_t limit = static_cast<size_t>(device::max_dynamic_smem());
  for (int64_t c : kSubChunks) {
    const int64_t used = std::min(c, cfg.chunk);
    if (static_cast<size_t>(layout(used, dims.dk, dims.dv).total) * sizeof(float) <= limit) return used;
  }
  return 0;
}

size_t backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t c) {
  return static_cast<size_t>(dims.slices * 2 * sub_chunks(dims, cfg, c).slots * dims.dk * dims.dv);
}

void forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t c, const float* q, const float* k,
             const float* v, const float* beta, const float* alpha, float* out, float* final_state, float* checkpoints,
             int64_t per_slice_checkpoints) {
  const int64_t cols = std::min(kColumnTile, dims.dv);
  const size_t smem = static_cast<size_t>(layout(c, dims.dk, cols).forward_total) * sizeof(float);
  device::allow_dynamic_smem(delta_rule_chunked_forward_kernel, smem);
  tarn::launch(delta_rule_chunked_forward_kernel, grid_of(dims.slices * column_tiles(dims.dv), "forward"), kThreads,
               smem, nullptr, dims, cfg, c, q, k, v, beta, alpha, out, final_state, checkpoints, per_slice_checkpoints);
}

void backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t c, const float* q, const float* k,
              const float* v, const float* beta, const float* alpha, const float* checkpoints, const float* d_out,
              const float* d_final_state, float* dq, float* dk, float* dv, float* d_beta, float* d_alpha,
              float* workspace, int64_t per_slice_checkpoints) {
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t tiled = dims.slices * column_tiles(dims.dv);
  const int64_t cols = std::min(kColumnTile, dims.dv);
  if (subs.per_chunk > 1) {
    const size_t smem = static_cast<size_t>(layout(c, dims.dk, cols).forward_total) * sizeof(float);
    device::allow_dynamic_smem(delta_rule_chunked_states_kernel, smem);
    tarn::launch(delta_rule_chunked_states_kernel, grid_of(tiled * subs.chunks, "states"), kThreads, smem,
                 nullptr, dims, cfg, c, k, v, beta, alpha, checkpoints, workspace, per_slice_checkpoints);
  }
  const size_t tiled_smem = static_cast<size_t>(layout(c, dims.dk, cols).total) * sizeof(float);
  device::allow_dynamic_smem(delta_rule_chunked_state_gradients_kernel, tiled_smem);
  tarn::launch(delta_rule_chunked_state_gradients_kernel, grid_of(tiled, "state gradients"), kThreads, tiled_smem,
               nullptr, dims, cfg, c, q, k, v, beta, alpha, d_out, d_final_state, workspace);
  const size_t smem = static_cast<size_t>(layout(c, dims.dk, dims.dv).total) * sizeof(float);
  device::allow_dynamic_smem(delta_rule_chunked_backward_kernel, smem);
  tarn::launch(delta_rule_chunked_backward_kernel, grid_of(dims.slices * subs.slots, "backward"), kThreads, smem,
               nullptr, dims, cfg, c, q, k, v, beta, alpha, checkpoints, d_out, dq, dk, dv, d_beta, d_alpha, workspace,
               per_slice_checkpoints);
}

}  // namespace delta_chunked
}  // namespace tarn::kernels::TARN_CUDA_NS
