// The gated delta rule's chunked scan in bf16 (kernels/cuda_delta_rule_bf16.h): the WY algebra
// of kernels/cuda/delta_rule_chunked.cu (its header comment derives it), split as
// flash-linear-attention splits its chunk_gated_delta_rule: everything that depends only on a
// sub-chunk's own tokens is computed for every sub-chunk at once, and the one sequential pass,
// over the state, is a few matrix products a sub-chunk. In a sub-chunk (D, A, b, e as there),
// with T = (I + A)^-1 and X = T diag(beta):
//
//   factors (per sub-chunk)   U = X V,  Khat = X diag(b) K,  P = D o Q K^T (s <= t),  T
//   state pass (in order)     W = U - Khat S0,  S <- b_{L-1} S0 + K^T diag(e) W
//   outputs (per sub-chunk)   out = diag(b) Q S0 + P W
//   state gradients (reverse) dW = P^T dout + diag(e) K dS,  dY = T^T dW,
//                             dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY
//   gradients (per sub-chunk) dq, dk, dv, d_beta, d_alpha from S0 and dS (backward_sub_chunk)
//
// since W = X (V - diag(b) K S0) = U - Khat S0, every column of the state evolves on its own
// given the factors: the in-order passes run a block per (slice, tile of 16 state columns) and
// hold no triangle, no substitution and no pair product, while the per-sub-chunk kernels have
// B H N / C blocks. The factors go through the workspace (U f32; Khat, P, T bf16, the rounding
// they get anyway as operands), as does the state before every sub-chunk (f32).
//
//   tensor cores   K K^T, Q K^T, U, Khat, Khat S0, Q S0, P W, S += K^T diag(e) W;
//                  K dS, P^T dout, T^T dW, dS0 += Q^T diag(b) dout - K^T diag(b beta) dY; and
//                  in the gradients kernel K S0, Q S0, W = X R, dY W^T, dout W^T,
//                  dq = diag(b) dout S0^T + (D o dP) K and
//                  dk = (D o dP)^T Q + (dKK + dKK^T) K - diag(b beta) dY S0^T + diag(e) W dS^T
//   CUDA cores     the decays D, A and P elementwise, the forward substitution for T (a column
//                  a thread, f32, per sub-chunk), the gradients kernel's own substitutions,
//                  d_beta, d_alpha and the decays' gradient G
//
// A product's operands are bf16 copies in shared memory, zero-padded to 16-multiples of rows
// and columns (a sub-chunk of L tokens sits in c = round16(L) rows; dk and the block's value
// columns round up alike), so padded rows and columns contribute exact zeros. Row scalings that
// feed a product (diag(b), diag(e), diag(b beta)) are folded into its bf16 operand; those of a
// result are applied in f32 after it. The state stays f32 in shared memory (the tensor cores
// accumulate onto it) and is rounded to bf16 only as an operand. Each 16x16 output tile has one
// warp and sums its terms in a fixed order, each f32 element one thread: the same bits on every
// run.
#include <algorithm>

#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/delta_rule_chunked_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda_delta_rule_bf16.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using delta_chunked::alpha_gradients;
using delta_chunked::SubChunks;
using delta_chunked::sub_chunks;

using cpu::DeltaRuleConfig;
using cpu::DeltaRuleDims;
using mma::bf16;

constexpr int kThreads = 256;
constexpr int kT = mma::kTile;
constexpr int64_t kSubChunks[] = {32, 16};  // tried in turn: the largest whose shared memory fits
constexpr int64_t kColumnTile = 16;         // state columns a block of the in-order passes owns
constexpr int kPadBf16 = 8;                 // extra elements a shared row: rows start in other
constexpr int kPadF32 = 4;                  // banks, and ld stays a multiple of 16 bytes (wmma)
constexpr size_t kAbsent = ~size_t{0};      // a buffer the kernel does not use

inline const bf16* device_bf16(const ::tarn::bf16* p) { return reinterpret_cast<const bf16*>(p); }
inline bf16* device_bf16(::tarn::bf16* p) { return reinterpret_cast<bf16*>(p); }

__host__ __device__ inline int64_t round16(int64_t n) { return (n + kT - 1) / kT * kT; }
__host__ __device__ inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline size_t round128(size_t b) { return (b + 127) / 128 * 128; }

// Which kernel a shared-memory layout serves.
enum class Pass { factors, states, outputs, state_gradients, backward };

// Byte offsets of a block's buffers (kAbsent where its kernel has none), for sub-chunks of at
// most `tokens` tokens, dk and `cols` state columns (dv in the per-sub-chunk kernels, a tile's
// width in the in-order passes). Names ending in h are bf16 operands.
struct Layout {
  int c, dk, cols;              // padded to 16: rows of a sub-chunk, key width, value columns
  int ldk, ldv, ldc;            // bf16 leading dimensions of rows of dk, cols, c elements
  int fk, fv, fc, fd;           // f32 leading dimensions (fd: D and G, columns -1 .. c - 1)
  size_t kh, qh, s0h, dsh, rh, xh, ph, wh, douth, bdouth, ybh, dyh, dqkh, mh, vh, bkh, wkh, th;
  size_t state, r, w, ks0, qs0, tmp, dy, dqo, dko, kk, qk, a, x, dyw, dow, d, g, beta, alpha, de, wk;
  size_t bytes;  // with mma::kSharedSlack for aligning the start
};

__host__ __device__ inline Layout layout(int64_t tokens, int64_t dk, int64_t cols, Pass pass) {
  Layout l{};
  l.c = static_cast<int>(round16(tokens));
  l.dk = static_cast<int>(round16(dk));
  l.cols = static_cast<int>(round16(cols));
  l.ldk = l.dk + kPadBf16, l.ldv = l.cols + kPadBf16, l.ldc = l.c + kPadBf16;
  l.fk = l.dk + kPadF32, l.fv = l.cols + kPadF32, l.fc = l.c + kPadF32, l.fd = l.c + 1;
  const bool F = pass == Pass::factors, S = pass == Pass::states, O = pass == Pass::outputs;
  const bool G = pass == Pass::state_gradients, B = pass == Pass::backward;
  const size_t h = sizeof(bf16), f = sizeof(float);
  const size_t rows_k = static_cast<size_t>(l.c), state_rows = static_cast<size_t>(l.dk);
  size_t at = 0;
  auto take = [&at](size_t bytes, bool needed) {
    if (!needed) return kAbsent;
    const size_t o = at;
    at += round128(bytes);
    return o;
  };
  l.kh = take(h * rows_k * l.ldk, !O);
  l.qh = take(h * rows_k * l.ldk, !S);
  l.s0h = take(h * state_rows * l.ldv, S || O || B);
  l.dsh = take(h * state_rows * l.ldv, G || B);
  l.rh = take(h * rows_k * l.ldv, S || B);  // diag(e) W (kernel 3: R first)
  l.xh = take(h * rows_k * l.ldc, F || B);
  l.ph = take(h * rows_k * l.ldc, !S);
  l.wh = take(h * rows_k * l.ldv, O || B);
  l.douth = take(h * rows_k * l.ldv, G || B);
  l.bdouth = take(h * rows_k * l.ldv, G || B);
  l.ybh = take(h * rows_k * l.ldv, G || B);
  l.dyh = take(h * rows_k * l.ldv, G || B);  // dW (state gradients), dY (kernel 3)
  l.dqkh = take(h * rows_k * l.ldc, B);
  l.mh = take(h * rows_k * l.ldc, B);
  l.vh = take(h * rows_k * l.ldv, F);
  l.bkh = take(h * rows_k * l.ldk, F);
  l.wkh = take(h * rows_k * l.ldk, S || O);
  l.th = take(h * rows_k * l.ldc, G);
  l.state = take(f * state_rows * l.fv, S || G);  // S (state pass), dS (state gradients)
  l.r = take(f * rows_k * l.fv, F || S || O || B);  // U (factors, state pass, outputs), R (kernel 3)
  l.w = take(f * rows_k * l.fv, B);
  l.ks0 = take(f * rows_k * l.fv, S || O || B);  // K S0 (kernel 3), Khat S0 (state pass, outputs)
  l.qs0 = take(f * rows_k * l.fv, O || B);
  l.tmp = take(f * rows_k * l.fv, O || G || B);  // P W (outputs), K dS (backward; kernel 3: then (K dS) o W)
  l.dy = take(f * rows_k * l.fv, G || B);
  l.dqo = take(f * rows_k * l.fk, B);
  l.dko = take(f * rows_k * l.fk, B);
  l.kk = take(f * rows_k * l.fc, F || B);
  l.qk = take(f * rows_k * l.fc, F || B);
  l.a = take(f * rows_k * l.fc, F || B);
  l.x = take(f * rows_k * l.fc, F || B);  // T = (I + A)^-1 (factors), X (kernel 3)
  // Kernel 3's dY W^T and dout W^T reuse X (spent once W = X R is formed) and A (spent after
  // the back substitution): both products come after those, past a barrier. At dk = dv = 64
  // this keeps 32-token sub-chunks within sm_80's 163 KiB.
  l.dyw = B ? l.x : kAbsent;
  l.dow = B ? l.a : kAbsent;
  l.wk = take(f * rows_k * l.fk, F);
  l.d = take(f * rows_k * l.fd, true);
  l.g = take(f * rows_k * l.fd, B);
  l.beta = take(f * rows_k, true);
  l.alpha = take(f * rows_k, true);
  l.de = take(f * rows_k, B);
  l.bytes = at + mma::kSharedSlack;
  return l;
}

// The shared buffers of a block, as pointers (null where absent).
struct Smem {
  Layout l;
  bf16 *kh, *qh, *s0h, *dsh, *rh, *xh, *ph, *wh, *douth, *bdouth, *ybh, *dyh, *dqkh, *mh, *vh, *bkh, *wkh, *th;
  float *state, *r, *w, *ks0, *qs0, *tmp, *dy, *dqo, *dko, *kk, *qk, *a, *x, *dyw, *dow, *d, *g, *beta, *alpha, *de;
  float* wk;
  __device__ Smem(unsigned char* base, const Layout& lay) : l(lay) {
    auto hp = [base](size_t o) { return o == kAbsent ? nullptr : reinterpret_cast<bf16*>(base + o); };
    auto fp = [base](size_t o) { return o == kAbsent ? nullptr : reinterpret_cast<float*>(base + o); };
    kh = hp(l.kh), qh = hp(l.qh), s0h = hp(l.s0h), dsh = hp(l.dsh), rh = hp(l.rh), xh = hp(l.xh), ph = hp(l.ph);
    wh = hp(l.wh), douth = hp(l.douth), bdouth = hp(l.bdouth), ybh = hp(l.ybh), dyh = hp(l.dyh);
    dqkh = hp(l.dqkh), mh = hp(l.mh), vh = hp(l.vh), bkh = hp(l.bkh), wkh = hp(l.wkh), th = hp(l.th);
    state = fp(l.state), r = fp(l.r), w = fp(l.w), ks0 = fp(l.ks0), qs0 = fp(l.qs0), tmp = fp(l.tmp), dy = fp(l.dy);
    dqo = fp(l.dqo), dko = fp(l.dko), kk = fp(l.kk), qk = fp(l.qk), a = fp(l.a), x = fp(l.x), dyw = fp(l.dyw);
    dow = fp(l.dow), d = fp(l.d), g = fp(l.g), beta = fp(l.beta), alpha = fp(l.alpha), de = fp(l.de);
    wk = fp(l.wk);
  }
  // D_ts for -1 <= s <= t (0 above the diagonal); G alike.
  __device__ float& D(int64_t t, int64_t s) const { return d[t * l.fd + s + 1]; }
  __device__ float& G(int64_t t, int64_t s) const { return g[t * l.fd + s + 1]; }
  // Element (t, s) of a c x c f32 buffer, and (t, j) of a row buffer of the value columns.
  __device__ float& cc(float* m, int64_t t, int64_t s) const { return m[t * l.fc + s]; }
  __device__ float& cv(float* m, int64_t t, int64_t j) const { return m[t * l.fv + j]; }
};

// ---- Tensor-core products ----

// A matrix operand in shared memory: element (i, j) at p[i * ld + j], or with `transposed` at
// p[j * ld + i] (the operand is the transpose of the row-major matrix stored there).
struct Operand {
  const bf16* p;
  int ld;
  bool transposed;
};
// a b, with a's columns (b's rows) `depth` long, a multiple of 16.
struct Term {
  Operand a, b;
  int depth;
};
// Up to four terms summed into one result.
struct Terms {
  Term t[4];
  int n = 0;
  __device__ Terms& add(const Operand& a, const Operand& b, int depth) {
    t[n++] = Term{a, b, depth};
    return *this;
  }
};

template <typename LA, typename LB>
__device__ __forceinline__ void add_term_as(mma::Accumulator& acc, const Term& term, int ti, int tj) {
  for (int kk = 0; kk < term.depth / kT; ++kk) {
    const Operand &a = term.a, &b = term.b;
    const bf16* pa = a.transposed ? a.p + kk * kT * a.ld + ti * kT : a.p + ti * kT * a.ld + kk * kT;
    const bf16* pb = b.transposed ? b.p + tj * kT * b.ld + kk * kT : b.p + kk * kT * b.ld + tj * kT;
    mma::FragmentA<LA> fa;
    mma::FragmentB<LB> fb;
    mma::load(fa, pa, a.ld);
    mma::load(fb, pb, b.ld);
    mma::multiply_add(acc, fa, fb);
  }
}

// acc += a b on output tile (ti, tj); the fragments' layouts are template parameters.
__device__ __forceinline__ void add_term(mma::Accumulator& acc, const Term& term, int ti, int tj) {
  if (!term.a.transposed && !term.b.transposed) add_term_as<mma::RowMajor, mma::RowMajor>(acc, term, ti, tj);
  if (!term.a.transposed && term.b.transposed) add_term_as<mma::RowMajor, mma::ColMajor>(acc, term, ti, tj);
  if (term.a.transposed && !term.b.transposed) add_term_as<mma::ColMajor, mma::RowMajor>(acc, term, ti, tj);
  if (term.a.transposed && term.b.transposed) add_term_as<mma::ColMajor, mma::ColMajor>(acc, term, ti, tj);
}

// out (rows x cols, f32, row stride ld; both multiples of 16) = [out +] the terms' sum, a 16x16
// tile per warp in turn, each term's depth in order. No barrier: callers place them. Inlined,
// with the terms taken by value and walked by constant indices, so that they stay in registers
// (a runtime-indexed array of them went to local memory and spilled).
__device__ __forceinline__ void product(float* out, int ld, int rows, int cols, const Terms terms, bool accumulate) {
  const int warp = threadIdx.x / device::kWarp, warps = blockDim.x / device::kWarp;
  const int col_tiles = cols / kT, tiles = rows / kT * col_tiles;
  for (int tile = warp; tile < tiles; tile += warps) {
    const int ti = tile / col_tiles, tj = tile % col_tiles;
    float* o = out + ti * kT * ld + tj * kT;
    mma::Accumulator acc;
    if (accumulate)
      mma::load(acc, o, ld);
    else
      mma::zero(acc);
#if defined(__CUDACC__)  // (g++ would warn about the pragma)
#pragma unroll
#endif
    for (int i = 0; i < 4; ++i)
      if (i < terms.n) add_term(acc, terms.t[i], ti, tj);
    mma::store(o, acc, ld);
  }
}

__device__ __forceinline__ Operand rows_of(const bf16* p, int ld) { return {p, ld, false}; }
__device__ __forceinline__ Operand transpose_of(const bf16* p, int ld) { return {p, ld, true}; }
__device__ __forceinline__ Terms one(const Operand& a, const Operand& b, int depth) {
  Terms t;
  t.add(a, b, depth);
  return t;
}

// ---- Loads ----

// One slice's inputs and the state columns j0 .. j0 + cols - 1 a block owns (all dv of them in
// kernel 3); row(t) is the row of scan position t.
struct Slice {
  const bf16 *q, *k, *v;  // q null: no readout
  const float *beta, *alpha;
  int64_t b, n, dk, dv, j0, cols;
  bool reverse, erase;
  __device__ int64_t row(int64_t t) const { return b * n + (reverse ? n - 1 - t : t); }
};

__host__ __device__ inline int64_t column_tiles(int64_t dv) { return (dv + kColumnTile - 1) / kColumnTile; }

// Loads the sub-chunk's L tokens: k and q (bf16, zero-padded), with `values` the block's
// columns of v into r (f32), beta and alpha (padded rows: beta 0, alpha 1).
__device__ __forceinline__ void load_rows(const Smem& m, const Slice& in, int64_t u0, int64_t L, bool values) {
  const Layout& l = m.l;
  const bf16 zero = mma::to_bf16(0.0f);
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.dk; e += blockDim.x) {
    const int64_t t = e / l.dk, i = e % l.dk;
    const bool valid = t < L && i < in.dk;
    const int64_t at = valid ? in.row(u0 + t) * in.dk + i : 0;
    m.kh[t * l.ldk + i] = valid ? in.k[at] : zero;
    m.qh[t * l.ldk + i] = valid && in.q != nullptr ? in.q[at] : zero;
  }
  if (values)
    for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
      const int64_t t = e / l.cols, j = e % l.cols;
      const bool valid = t < L && j < in.cols;
      m.cv(m.r, t, j) = valid ? mma::to_float(in.v[in.row(u0 + t) * in.dv + in.j0 + j]) : 0.0f;
    }
  for (int64_t t = threadIdx.x; t < l.c; t += blockDim.x) {
    m.beta[t] = t < L ? in.beta[in.row(u0 + t)] : 0.0f;
    m.alpha[t] = t < L ? in.alpha[in.row(u0 + t)] : 1.0f;
  }
}

// The block's columns of d_out's rows into douth (zero-padded; all zeros without a readout).
__device__ __forceinline__ void load_d_out(const Smem& m, const Slice& in, int64_t u0, int64_t L, const bf16* d_out) {
  const Layout& l = m.l;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const bool valid = d_out != nullptr && t < L && j < in.cols;
    m.douth[t * l.ldv + j] = valid ? d_out[in.row(u0 + t) * in.dv + in.j0 + j] : mma::to_bf16(0.0f);
  }
}

// The block's columns of a state in global memory (null: zero) into f32 `tile` (may be null)
// and its bf16 copy, zero-padded.
__device__ __forceinline__ void load_state(float* tile, bf16* copy, const float* from, const Slice& in, const Layout& l) {
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x) {
    const int64_t i = e / l.cols, j = e % l.cols;
    const float s = from != nullptr && i < in.dk && j < in.cols ? from[i * in.dv + in.j0 + j] : 0.0f;
    if (tile != nullptr) tile[i * l.fv + j] = s;
    copy[i * l.ldv + j] = mma::to_bf16(s);
  }
}
__device__ __forceinline__ void store_state(float* to, const float* tile, const Slice& in, const Layout& l) {
  // 32-bit indices (a state has far fewer than 2^31 elements): the state pass keeps its
  // registers within ptxas's budget without spilling.
  const int cols = static_cast<int>(in.cols), dv = static_cast<int>(in.dv);
  float* base = to + in.j0;
  for (int e = threadIdx.x; e < static_cast<int>(in.dk) * cols; e += blockDim.x) {
    const int i = e / cols, j = e % cols;
    base[i * dv + j] = tile[i * l.fv + j];
  }
}
// The bf16 copy of the f32 state tile.
__device__ __forceinline__ void round_state(bf16* copy, const float* tile, const Layout& l) {
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x) {
    const int64_t i = e / l.cols, j = e % l.cols;
    copy[i * l.ldv + j] = mma::to_bf16(tile[i * l.fv + j]);
  }
}

// ---- The sub-chunk's CUDA-core steps ----

// A = beta_t D_ts (k_t . k_s) below the diagonal (erase) and P = D o (Q K^T) on and below it
// as bf16 (readout), from the products in kk and qk, over the whole padded c x c.
__device__ __forceinline__ void pairs(const Smem& m, int64_t L, bool erase, bool readout) {
  const int c = m.l.c;
  for (int64_t e = threadIdx.x; e < int64_t{c} * c; e += blockDim.x) {
    const int64_t t = e / c, s = e % c;
    const bool live = t < L && s < L;
    if (erase) m.cc(m.a, t, s) = live && s < t ? m.beta[t] * m.D(t, s) * m.cc(m.kk, t, s) : 0.0f;
    if (readout) m.ph[t * m.l.ldc + s] = mma::to_bf16(live && s <= t ? m.D(t, s) * m.cc(m.qk, t, s) : 0.0f);
  }
}

// R = V - diag(b) K S0 (erase) in r, and its bf16 copy in rh.
__device__ void residuals(const Smem& m, int64_t L, bool erase) {
  const Layout& l = m.l;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    float r = m.cv(m.r, t, j);
    if (erase && t < L) r -= m.D(t, -1) * m.cv(m.ks0, t, j);
    m.cv(m.r, t, j) = r;
    m.rh[t * l.ldv + j] = mma::to_bf16(r);
  }
}

// X = (I + A)^-1 diag(beta), a column a thread in f32 (X_tc = 0 for t < c), and its bf16 copy.
__device__ void solve_writes(const Smem& m, int64_t L, bool erase) {
  const int c = m.l.c;
  for (int64_t col = threadIdx.x; col < c; col += blockDim.x)
    for (int64_t t = 0; t < c; ++t) {
      float x = 0.0f;
      if (t < L && col <= t) {
        x = t == col ? m.beta[t] : 0.0f;
        if (erase)
          for (int64_t s = col; s < t; ++s) x -= m.cc(m.a, t, s) * m.cc(m.x, s, col);
      }
      m.cc(m.x, t, col) = x;
      m.xh[t * m.l.ldc + col] = mma::to_bf16(x);
    }
}

// (I + A)^T dY = dW in place in dy, a column a thread from the last row up.
__device__ void back_substitute(const Smem& m, int64_t L) {
  for (int64_t j = threadIdx.x; j < m.l.cols; j += blockDim.x)
    for (int64_t t = L - 1; t >= 0; --t) {
      float y = m.cv(m.dy, t, j);
      for (int64_t s = t + 1; s < L; ++s) y -= m.cc(m.a, s, t) * m.cv(m.dy, s, j);
      m.cv(m.dy, t, j) = y;
    }
}

// The pair products of a sub-chunk: K K^T (erase), Q K^T (readout). No barrier.
__device__ __forceinline__ void pair_products(const Smem& m, bool erase, bool readout) {
  const Layout& l = m.l;
  if (erase) product(m.kk, l.fc, l.c, l.c, one(rows_of(m.kh, l.ldk), transpose_of(m.kh, l.ldk), l.dk), false);
  if (readout) product(m.qk, l.fc, l.c, l.c, one(rows_of(m.qh, l.ldk), transpose_of(m.kh, l.ldk), l.dk), false);
}

// A sub-chunk's writes from its starting state, the common first half of the forward and of
// kernel 3 (after decays): K S0 (erase), Q S0 (readout) and, with k_ds, K dS into tmp; the
// pairs, the residuals R, X and W = X R; then W as bf16 in wh and diag(e) W in rh (R is spent).
// Ends without a barrier after the bf16 copies.
__device__ void writes_from_state(const Smem& m, int64_t L, bool erase, bool readout, bool k_ds) {
  const Layout& l = m.l;
  pair_products(m, erase, readout);
  if (erase) product(m.ks0, l.fv, l.c, l.cols, one(rows_of(m.kh, l.ldk), rows_of(m.s0h, l.ldv), l.dk), false);
  if (readout) product(m.qs0, l.fv, l.c, l.cols, one(rows_of(m.qh, l.ldk), rows_of(m.s0h, l.ldv), l.dk), false);
  if (k_ds) product(m.tmp, l.fv, l.c, l.cols, one(rows_of(m.kh, l.ldk), rows_of(m.dsh, l.ldv), l.dk), false);
  __syncthreads();
  pairs(m, L, erase, readout);
  residuals(m, L, erase);
  __syncthreads();
  solve_writes(m, L, erase);
  __syncthreads();
  product(m.w, l.fv, l.c, l.cols, one(rows_of(m.xh, l.ldc), rows_of(m.rh, l.ldv), l.c), false);  // W = X R
  __syncthreads();
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const float w = m.cv(m.w, t, j);
    m.wh[t * l.ldv + j] = mma::to_bf16(w);
    m.rh[t * l.ldv + j] = mma::to_bf16(t < L ? m.D(L - 1, t) * w : 0.0f);
  }
}

// The slice and column tile of a tiled kernel's block number `block` (slice-major).
__device__ Slice tiled_slice(int64_t block, const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const bf16* q,
                             const bf16* k, const bf16* v, const float* beta, const float* alpha) {
  const int64_t tiles = column_tiles(dims.dv), b = block / tiles, tile = block % tiles;
  return {q,       k,       v,       beta, alpha, b, dims.n, dims.dk, dims.dv, tile * kColumnTile,
          smaller(kColumnTile, dims.dv - tile * kColumnTile), cfg.reverse, cfg.erase};
}

// ---- The workspace ----

// Floats a slot of the workspace takes for each part (sub_chunks() numbers the slots; a
// sub-chunk's rows are padded to c = round16 of its tokens, the padded rows zero).
struct SlotSizes {
  int64_t state, u, khat, pair;
};
__host__ __device__ inline SlotSizes slot_sizes(const DeltaRuleDims& dims, int64_t c) {
  const int64_t rows = round16(c);
  return {dims.dk * dims.dv, rows * dims.dv, (rows * dims.dk + 1) / 2, rows * rows / 2};
}
__host__ __device__ inline int64_t slot_floats(const DeltaRuleDims& dims, int64_t c, bool backward) {
  const SlotSizes z = slot_sizes(dims, c);
  return (backward ? 2 : 1) * (z.state + z.pair) + z.u + z.khat;
}

// A slice's workspace: per sub-chunk slot, the f32 state before the sub-chunk; in the backward
// the f32 gradient of the state after it; and the sub-chunk's factors from the factors kernel:
// U = X V (c x dv, f32), Khat = X diag(b) K (c x dk, bf16, with the erase), P = D o Q K^T on and
// below the diagonal (c x c, bf16, with a readout) and in the backward T = (I + A)^-1 (c x c,
// bf16, with the erase), X = T diag(beta) being the forward substitution's (I + A)^-1 diag(beta).
struct Factors {
  float *states, *grads, *u;
  bf16 *khat, *p, *t;
  SlotSizes z;
  int64_t rows;  // c rounded to 16
  __device__ float* state(int64_t slot) const { return states + slot * z.state; }
  __device__ float* grad(int64_t slot) const { return grads + slot * z.state; }
  __device__ float* u_of(int64_t slot) const { return u + slot * z.u; }
  __device__ bf16* khat_of(int64_t slot) const { return khat + slot * 2 * z.khat; }
  __device__ bf16* p_of(int64_t slot) const { return p + slot * 2 * z.pair; }
  __device__ bf16* t_of(int64_t slot) const { return t + slot * 2 * z.pair; }
};
__device__ inline Factors factors_of(float* workspace, const DeltaRuleDims& dims, const SubChunks& subs, int64_t c,
                                     int64_t b, bool backward) {
  Factors f{};
  f.z = slot_sizes(dims, c);
  f.rows = round16(c);
  float* at = workspace + b * subs.slots * slot_floats(dims, c, backward);
  f.states = at, at += subs.slots * f.z.state;
  f.grads = backward ? at : nullptr, at += backward ? subs.slots * f.z.state : 0;
  f.u = at, at += subs.slots * f.z.u;
  f.khat = reinterpret_cast<bf16*>(at), at += subs.slots * f.z.khat;
  f.p = reinterpret_cast<bf16*>(at), at += subs.slots * f.z.pair;
  f.t = backward ? reinterpret_cast<bf16*>(at) : nullptr;
  return f;
}

// The sub-chunk a per-sub-chunk kernel's block serves: its slot, first scan position and tokens
// (L = 0: an empty slot of the last chunk, whose block leaves).
struct SubChunk {
  int64_t b, slot, u, u0, L;
};
__device__ inline SubChunk sub_chunk_of(int64_t block, const DeltaRuleDims& dims, const DeltaRuleConfig& cfg,
                                        const SubChunks& subs, int64_t c) {
  const int64_t b = block / subs.slots, slot = block % subs.slots;
  const int64_t ci = slot / subs.per_chunk, u = slot % subs.per_chunk;
  const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk), u0 = t0 + u * c;
  return {b, slot, u, u0, u0 < t1 ? smaller(c, t1 - u0) : 0};
}

// A c x cols tile (padded to the layout's rows and columns with zeros) from global rows of
// `width` elements, columns j0 .. j0 + cols - 1: into bf16 `h` (row stride ldh) or f32 `f`
// (row stride ldf), whichever is given.
__device__ __forceinline__ void load_tile(bf16* h, int ldh, float* f, int ldf, int rows, int padded_cols, const bf16* from_h,
                          const float* from_f, int64_t width, int64_t j0, int64_t cols) {
  for (int64_t e = threadIdx.x; e < int64_t{rows} * padded_cols; e += blockDim.x) {
    const int64_t t = e / padded_cols, j = e % padded_cols;
    const bool valid = j < cols;
    if (h != nullptr)
      h[t * ldh + j] = valid ? from_h[t * width + j0 + j] : mma::to_bf16(0.0f);
    else
      f[t * ldf + j] = valid ? from_f[t * width + j0 + j] : 0.0f;
  }
}

// ---- The factors of every sub-chunk at once (forward, and again in the backward) ----

// The factors kernel's results from shared memory into the workspace's slot: U, and Khat, P and
// T where they exist.
__device__ __forceinline__ void store_factors(const Smem& m, const Factors& f, int64_t slot, int64_t dk, int64_t dv,
                                           bool readout, bool erase, bool backward) {
  const Layout& l = m.l;
  float* u = f.u_of(slot);
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * dv; e += blockDim.x) u[e] = m.cv(m.r, e / dv, e % dv);
  if (erase) {
    bf16* khat = f.khat_of(slot);
    for (int64_t e = threadIdx.x; e < int64_t{l.c} * dk; e += blockDim.x)
      khat[e] = mma::to_bf16(m.wk[(e / dk) * l.fk + e % dk]);
  }
  if (readout) {
    bf16* p = f.p_of(slot);
    for (int e = threadIdx.x; e < l.c * l.c; e += blockDim.x) p[e] = m.ph[(e / l.c) * l.ldc + e % l.c];
  }
  if (backward && erase) {
    bf16* t = f.t_of(slot);
    for (int e = threadIdx.x; e < l.c * l.c; e += blockDim.x) t[e] = mma::to_bf16(m.cc(m.x, e / l.c, e % l.c));
  }
}

// A block per (slice, sub-chunk slot): D, the pair products, A and P; T = (I + A)^-1 by forward
// substitution (a column a thread, f32) and X = T diag(beta) as bf16; then U = X V and
// Khat = X diag(b) K on tensor cores, all into the workspace's slot. Given these, every column
// of the state evolves on its own: W = X (V - diag(b) K S0) = U - Khat S0.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_factors_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q, const bf16* k,
                                   const bf16* v, const float* beta, const float* alpha, float* workspace,
                                   bool backward) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const SubChunk sc = sub_chunk_of(blockIdx.x, dims, cfg, subs, c);
  if (sc.L == 0) return;  // the whole block leaves
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, dims.dv, Pass::factors));
  const Layout& l = m.l;
  const Slice in{q, k, v, beta, alpha, sc.b, dims.n, dims.dk, dims.dv, 0, dims.dv, cfg.reverse, cfg.erase};
  const bool readout = q != nullptr, erase = cfg.erase;
  const Factors f = factors_of(workspace, dims, subs, c, sc.b, backward);
  const int64_t L = sc.L, slot = sc.slot;
  load_rows(m, in, sc.u0, L, false);
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const bool valid = t < L && j < dims.dv;
    m.vh[t * l.ldv + j] = valid ? v[in.row(sc.u0 + t) * dims.dv + j] : mma::to_bf16(0.0f);
  }
  __syncthreads();
  delta_chunked::decays(m, L);
  pair_products(m, erase, readout);
  __syncthreads();
  pairs(m, L, erase, readout);
  if (erase)  // diag(b) K, the operand of Khat
    for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.dk; e += blockDim.x) {
      const int64_t t = e / l.dk, i = e % l.dk;
      m.bkh[t * l.ldk + i] = mma::to_bf16(t < L ? m.D(t, -1) * mma::to_float(m.kh[t * l.ldk + i]) : 0.0f);
    }
  __syncthreads();
  for (int64_t col = threadIdx.x; col < l.c; col += blockDim.x)
    for (int64_t t = 0; t < l.c; ++t) {
      float x = 0.0f;
      if (t < L && col <= t) {
        x = t == col ? 1.0f : 0.0f;
        if (erase)
          for (int64_t s = col; s < t; ++s) x -= m.cc(m.a, t, s) * m.cc(m.x, s, col);
      }
      m.cc(m.x, t, col) = x;
      m.xh[t * l.ldc + col] = mma::to_bf16(x * m.beta[col]);
    }
  __syncthreads();
  product(m.r, l.fv, l.c, l.cols, one(rows_of(m.xh, l.ldc), rows_of(m.vh, l.ldv), l.c), false);  // U = X V
  if (erase) product(m.wk, l.fk, l.c, l.dk, one(rows_of(m.xh, l.ldc), rows_of(m.bkh, l.ldk), l.c), false);
  __syncthreads();
  store_factors(m, f, slot, dims.dk, dims.dv, readout, erase, backward);
}

// ---- The in-order pass over the state ----

// One sub-chunk of the block's columns of the state (m.state, f32, and its bf16 copy m.s0h),
// which it advances: W = U - Khat S0 (U alone without the erase), S <- b_{L-1} S0 +
// K^T diag(e) W. Starts and ends with every thread past a barrier.
__device__ __forceinline__ void advance_state(const Smem& m, const Slice& in, const Factors& f, int64_t slot, int64_t u0, int64_t L) {
  const Layout& l = m.l;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.dk; e += blockDim.x) {
    const int64_t t = e / l.dk, i = e % l.dk;
    m.kh[t * l.ldk + i] = t < L && i < in.dk ? in.k[in.row(u0 + t) * in.dk + i] : mma::to_bf16(0.0f);
  }
  for (int64_t t = threadIdx.x; t < l.c; t += blockDim.x) m.alpha[t] = t < L ? in.alpha[in.row(u0 + t)] : 1.0f;
  load_tile(nullptr, 0, m.r, l.fv, l.c, l.cols, nullptr, f.u_of(slot), in.dv, in.j0, in.cols);
  if (in.erase) load_tile(m.wkh, l.ldk, nullptr, 0, l.c, l.dk, f.khat_of(slot), nullptr, in.dk, 0, in.dk);
  __syncthreads();
  delta_chunked::decays(m, L);
  if (in.erase) product(m.ks0, l.fv, l.c, l.cols, one(rows_of(m.wkh, l.ldk), rows_of(m.s0h, l.ldv), l.dk), false);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const float w = m.cv(m.r, t, j) - (in.erase ? m.cv(m.ks0, t, j) : 0.0f);
    m.rh[t * l.ldv + j] = mma::to_bf16(t < L ? m.D(L - 1, t) * w : 0.0f);
  }
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x)
    m.state[(e / l.cols) * l.fv + e % l.cols] *= decay;
  __syncthreads();
  product(m.state, l.fv, l.dk, l.cols, one(transpose_of(m.kh, l.ldk), rows_of(m.rh, l.ldv), l.c), true);
  __syncthreads();
  round_state(m.s0h, m.state, l);
  __syncthreads();
}

// The state's pass in scan order, the only sequential work: a block per (slice, column tile)
// over the whole sequence (forward: stores the checkpoints and the final state), or in the
// backward a block per (slice, column tile, chunk) from the chunk's checkpoint (read from
// from_checkpoints). With keep_states, the state before every sub-chunk goes to the workspace.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_state_pass_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* k,
                                      const float* alpha, float* workspace, bool backward, bool keep_states,
                                      float* final_state, float* checkpoints, const float* from_checkpoints,
                                      int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t block = backward ? blockIdx.x / subs.chunks : blockIdx.x;
  const int64_t first = backward ? blockIdx.x % subs.chunks : 0, last = backward ? first + 1 : subs.chunks;
  const Slice in = tiled_slice(block, dims, cfg, nullptr, k, nullptr, nullptr, alpha);
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, in.cols, Pass::states));
  const Factors f = factors_of(workspace, dims, subs, c, in.b, backward);
  const int64_t state = dims.dk * dims.dv;
  const float* start =
      backward && first > 0 ? from_checkpoints + (in.b * per_slice_checkpoints + first - 1) * state : nullptr;
  load_state(m.state, m.s0h, start, in, m.l);
  __syncthreads();
  for (int64_t ci = first; ci < last; ++ci) {
    const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
    if (!backward && checkpoints != nullptr && t0 > 0)
      store_state(checkpoints + (in.b * per_slice_checkpoints + ci - 1) * state, m.state, in, m.l);
    for (int64_t u0 = t0, slot = ci * subs.per_chunk; u0 < t1; u0 += c, ++slot) {
      if (keep_states) store_state(f.state(slot), m.state, in, m.l);
      if (backward && u0 + c >= t1) break;  // nothing reads the state after a chunk's last sub-chunk
      advance_state(m, in, f, slot, u0, smaller(c, t1 - u0));
    }
  }
  if (final_state != nullptr) store_state(final_state + in.b * state, m.state, in, m.l);
}

// ---- The forward's outputs, every sub-chunk at once ----

// A block per (slice, sub-chunk slot): out = diag(b) Q S0 + P W, W = U - Khat S0 (the same
// products, in the same order, as the state pass's).
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_outputs_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q,
                                   const float* alpha, float* workspace, bf16* out) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const SubChunk sc = sub_chunk_of(blockIdx.x, dims, cfg, subs, c);
  if (sc.L == 0) return;  // the whole block leaves
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, dims.dv, Pass::outputs));
  const Layout& l = m.l;
  const Slice in{q, nullptr, nullptr, nullptr, alpha, sc.b, dims.n, dims.dk, dims.dv, 0, dims.dv, cfg.reverse,
                 cfg.erase};
  const Factors f = factors_of(workspace, dims, subs, c, sc.b, false);
  const int64_t L = sc.L, slot = sc.slot, dv = dims.dv;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.dk; e += blockDim.x) {
    const int64_t t = e / l.dk, i = e % l.dk;
    m.qh[t * l.ldk + i] = t < L && i < dims.dk ? q[in.row(sc.u0 + t) * dims.dk + i] : mma::to_bf16(0.0f);
  }
  for (int64_t t = threadIdx.x; t < l.c; t += blockDim.x) m.alpha[t] = t < L ? alpha[in.row(sc.u0 + t)] : 1.0f;
  load_state(nullptr, m.s0h, f.state(slot), in, l);
  load_tile(nullptr, 0, m.r, l.fv, l.c, l.cols, nullptr, f.u_of(slot), dv, 0, dv);
  if (in.erase) load_tile(m.wkh, l.ldk, nullptr, 0, l.c, l.dk, f.khat_of(slot), nullptr, dims.dk, 0, dims.dk);
  load_tile(m.ph, l.ldc, nullptr, 0, l.c, l.c, f.p_of(slot), nullptr, l.c, 0, l.c);
  __syncthreads();
  delta_chunked::decays(m, L);
  if (in.erase) product(m.ks0, l.fv, l.c, l.cols, one(rows_of(m.wkh, l.ldk), rows_of(m.s0h, l.ldv), l.dk), false);
  product(m.qs0, l.fv, l.c, l.cols, one(rows_of(m.qh, l.ldk), rows_of(m.s0h, l.ldv), l.dk), false);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    m.wh[t * l.ldv + j] = mma::to_bf16(m.cv(m.r, t, j) - (in.erase ? m.cv(m.ks0, t, j) : 0.0f));
  }
  __syncthreads();
  product(m.tmp, l.fv, l.c, l.cols, one(rows_of(m.ph, l.ldc), rows_of(m.wh, l.ldv), l.c), false);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < L * dv; e += blockDim.x) {
    const int64_t t = e / dv, j = e % dv;
    out[in.row(sc.u0 + t) * dv + j] = mma::to_bf16(m.D(t, -1) * m.cv(m.qs0, t, j) + m.cv(m.tmp, t, j));
  }
}

// dW = P^T dout + diag(e) K dS into dy (K dS in tmp already) and, with the erase, the back
// substitution. Ends past a barrier.
__device__ void write_gradients(const Smem& m, int64_t L, bool erase, bool readout) {
  const Layout& l = m.l;
  if (readout) {
    product(m.dy, l.fv, l.c, l.cols, one(transpose_of(m.ph, l.ldc), rows_of(m.douth, l.ldv), l.c), false);
    __syncthreads();
  }
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const float kds = t < L ? m.D(L - 1, t) * m.cv(m.tmp, t, j) : 0.0f;
    m.cv(m.dy, t, j) = (readout ? m.cv(m.dy, t, j) : 0.0f) + kds;
  }
  __syncthreads();
  if (erase) {
    back_substitute(m, L);
    __syncthreads();
  }
}

// The bf16 operands diag(b) dout (readout) and -diag(b beta) dY (erase) of the products with
// the state or its gradient, zero elsewhere.
__device__ __forceinline__ void scaled_gradients(const Smem& m, int64_t L, bool erase, bool readout) {
  const Layout& l = m.l;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const float b = t < L ? m.D(t, -1) : 0.0f;
    m.bdouth[t * l.ldv + j] = mma::to_bf16(readout ? b * mma::to_float(m.douth[t * l.ldv + j]) : 0.0f);
    m.ybh[t * l.ldv + j] = mma::to_bf16(erase ? -(b * m.beta[t]) * m.cv(m.dy, t, j) : 0.0f);
  }
}

// dS <- dS0 over one sub-chunk for the block's columns: m.state (and dsh) holds the gradient of
// the state after the sub-chunk and ends holding the gradient of the state before it:
//   dW = P^T dout + diag(e) K dS,  dY = T^T dW  ((I + A)^T dY = dW: a product with the
//   factors kernel's T, not a substitution in the sequential pass),
//   dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY.
__device__ __forceinline__ void state_gradient_sub_chunk(const Smem& m, const Slice& in, const Factors& f, int64_t slot, int64_t u0,
                                         int64_t L, const bf16* d_out) {
  const Layout& l = m.l;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_rows(m, in, u0, L, false);
  load_d_out(m, in, u0, L, readout ? d_out : nullptr);
  if (readout) load_tile(m.ph, l.ldc, nullptr, 0, l.c, l.c, f.p_of(slot), nullptr, l.c, 0, l.c);
  if (erase) load_tile(m.th, l.ldc, nullptr, 0, l.c, l.c, f.t_of(slot), nullptr, l.c, 0, l.c);
  __syncthreads();
  delta_chunked::decays(m, L);
  product(m.tmp, l.fv, l.c, l.cols, one(rows_of(m.kh, l.ldk), rows_of(m.dsh, l.ldv), l.dk), false);  // K dS
  if (readout) product(m.dy, l.fv, l.c, l.cols, one(transpose_of(m.ph, l.ldc), rows_of(m.douth, l.ldv), l.c), false);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const float dw = (readout ? m.cv(m.dy, t, j) : 0.0f) + (t < L ? m.D(L - 1, t) * m.cv(m.tmp, t, j) : 0.0f);
    m.cv(m.dy, t, j) = dw;
    if (erase) m.dyh[t * l.ldv + j] = mma::to_bf16(dw);
  }
  __syncthreads();
  if (erase) {
    product(m.dy, l.fv, l.c, l.cols, one(transpose_of(m.th, l.ldc), rows_of(m.dyh, l.ldv), l.c), false);
    __syncthreads();
  }
  scaled_gradients(m, L, erase, readout);
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x)
    m.state[(e / l.cols) * l.fv + e % l.cols] *= decay;
  __syncthreads();
  // Absent terms get depth 0 rather than no slot, so that the terms' count is a constant and
  // they stay in registers (a count known only at run time put them on the stack).
  Terms terms;
  terms.add(transpose_of(m.qh, l.ldk), rows_of(m.bdouth, l.ldv), readout ? l.c : 0);
  terms.add(transpose_of(m.kh, l.ldk), rows_of(m.ybh, l.ldv), erase ? l.c : 0);
  product(m.state, l.fv, l.dk, l.cols, terms, true);
  __syncthreads();
  round_state(m.dsh, m.state, l);
  __syncthreads();
}

// The state gradients, a block per (slice, column tile): the gradient of the state after each
// sub-chunk, walking them in reverse from d_final_state, into the workspace.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_state_gradients_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q,
                                           const bf16* k, const float* beta, const float* alpha, const bf16* d_out,
                                           const float* d_final_state, float* workspace) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const Slice in = tiled_slice(blockIdx.x, dims, cfg, q, k, nullptr, beta, alpha);
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, in.cols, Pass::state_gradients));
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t state = dims.dk * dims.dv;
  const Factors f = factors_of(workspace, dims, subs, c, in.b, true);
  load_state(m.state, m.dsh, d_final_state != nullptr ? d_final_state + in.b * state : nullptr, in, m.l);
  for (int64_t ci = subs.chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
    for (int64_t u = (t1 - t0 + c - 1) / c - 1; u >= 0; --u) {
      __syncthreads();  // m.state is written
      const int64_t slot = ci * subs.per_chunk + u;
      store_state(f.grad(slot), m.state, in, m.l);
      if (ci == 0 && u == 0) break;  // the scan starts from zero: nothing reads dS before it
      const int64_t u0 = t0 + u * c;
      state_gradient_sub_chunk(m, in, f, slot, u0, smaller(c, t1 - u0), d_out);
    }
  }
}

// Where kernel 3 writes a sub-chunk's gradients.
struct Gradients {
  bf16 *dq, *dk, *dv;
  float *d_beta, *d_alpha;
};

// The backward of one sub-chunk over the whole state (cols = dv): s0h holds its starting state
// and dsh the gradient of the state after it; d_last = <S0, dS> (f32, summed at load).
__device__ void backward_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, const bf16* d_out,
                                   float part, const Gradients& out) {
  const Layout& l = m.l;
  const int64_t dk = in.dk, dv = in.dv;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_rows(m, in, u0, L, true);
  load_d_out(m, in, u0, L, readout ? d_out : nullptr);
  __syncthreads();
  delta_chunked::decays(m, L);
  writes_from_state(m, L, erase, readout, true);
  // tmp: K dS -> (K dS) o W, e's gradient per element.
  // (write_gradients reads K dS from tmp before the product below overwrites it.)
  write_gradients(m, L, erase, readout);
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    m.cv(m.tmp, t, j) *= m.cv(m.w, t, j);
    m.dyh[t * l.ldv + j] = mma::to_bf16(m.cv(m.dy, t, j));
  }
  scaled_gradients(m, L, erase, readout);
  __syncthreads();
  // dY W^T (dA = its negation below the diagonal) and dout W^T (dP on and below it).
  if (erase) product(m.dyw, l.fc, l.c, l.c, one(rows_of(m.dyh, l.ldv), transpose_of(m.wh, l.ldv), l.cols), false);
  if (readout) product(m.dow, l.fc, l.c, l.c, one(rows_of(m.douth, l.ldv), transpose_of(m.wh, l.ldv), l.cols), false);
  __syncthreads();
  // D o dP and dKK + dKK^T (dKK = diag(beta) (D o dA)) as bf16; G_ts for 0 <= s < t.
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.c; e += blockDim.x) {
    const int64_t t = e / l.c, s = e % l.c;
    float g = 0.0f, dqk = 0.0f, sym = 0.0f;
    if (t < L && s < L) {
      if (erase) {
        const float da = s < t ? -m.cc(m.dyw, t, s) : 0.0f;
        const float da_mirror = t < s ? -m.cc(m.dyw, s, t) : 0.0f;
        g += da * m.beta[t] * m.cc(m.kk, t, s);
        sym = da * m.beta[t] * m.D(t, s) + da_mirror * m.beta[s] * m.D(s, t);
      }
      if (readout) {
        const float dp = s <= t ? m.cc(m.dow, t, s) : 0.0f;
        dqk = dp * m.D(t, s);
        if (s < t) g += dp * m.cc(m.qk, t, s);
      }
      m.G(t, s) = s < t ? g : 0.0f;
    }
    m.dqkh[t * l.ldc + s] = mma::to_bf16(dqk);
    m.mh[t * l.ldc + s] = mma::to_bf16(sym);
  }
  __syncthreads();
  if (readout) {
    Terms dq_terms;
    dq_terms.add(rows_of(m.bdouth, l.ldv), transpose_of(m.s0h, l.ldv), l.cols);
    dq_terms.add(rows_of(m.dqkh, l.ldc), rows_of(m.kh, l.ldk), l.c);
    product(m.dqo, l.fk, l.c, l.dk, dq_terms, false);
  }
  Terms dk_terms;  // absent terms with depth 0, as in state_gradient_sub_chunk
  dk_terms.add(rows_of(m.rh, l.ldv), transpose_of(m.dsh, l.ldv), l.cols);  // diag(e) W dS^T
  dk_terms.add(transpose_of(m.dqkh, l.ldc), rows_of(m.qh, l.ldk), readout ? l.c : 0);
  dk_terms.add(rows_of(m.mh, l.ldc), rows_of(m.kh, l.ldk), erase ? l.c : 0);
  dk_terms.add(rows_of(m.ybh, l.ldv), transpose_of(m.s0h, l.ldv), erase ? l.cols : 0);
  product(m.dko, l.fk, l.c, l.dk, dk_terms, false);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < L * dk; e += blockDim.x) {
    const int64_t t = e / dk, i = e % dk, row = in.row(u0 + t);
    if (readout) out.dq[row * dk + i] = mma::to_bf16(m.dqo[t * l.fk + i]);
    out.dk[row * dk + i] = mma::to_bf16(m.dko[t * l.fk + i]);
  }
  for (int64_t e = threadIdx.x; e < L * dv; e += blockDim.x)
    out.dv[in.row(u0 + e / dv) * dv + e % dv] = mma::to_bf16(m.beta[e / dv] * m.cv(m.dy, e / dv, e % dv));
  for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
    float db = 0.0f, dbeta = 0.0f, de = 0.0f;
    for (int64_t j = 0; j < dv; ++j) {
      dbeta += m.cv(m.r, t, j) * m.cv(m.dy, t, j);
      if (readout) db += m.cv(m.qs0, t, j) * mma::to_float(m.douth[t * l.ldv + j]);
      de += m.cv(m.tmp, t, j);
    }
    if (erase) {
      float kd = 0.0f;
      for (int64_t j = 0; j < dv; ++j) kd += m.cv(m.ks0, t, j) * m.cv(m.dy, t, j);
      db -= m.beta[t] * kd;
      for (int64_t s = 0; s < t; ++s) dbeta += -m.cc(m.dyw, t, s) * m.D(t, s) * m.cc(m.kk, t, s);
    }
    m.G(t, -1) = db;
    m.de[t] = de;
    out.d_beta[in.row(u0 + t)] = dbeta;
  }
  const float d_last = device::block_sum(part);  // ends past a barrier: the rows above are in
  // e_s = D_{L-1,s} (s < L - 1) and b_{L-1} = D_{L-1,-1} join G's last row.
  alpha_gradients(m, in, u0, L, d_last, out.d_alpha);
}

// The gradients, a block per (slice, sub-chunk slot), every sub-chunk at once, from the state
// before it and the gradient of the state after it (the workspace's, over the whole state).
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_backward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q, const bf16* k,
                                    const bf16* v, const float* beta, const float* alpha, const bf16* d_out,
                                    Gradients grads, float* workspace) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const SubChunk sc = sub_chunk_of(blockIdx.x, dims, cfg, subs, c);
  if (sc.L == 0) return;  // an empty slot of the last chunk: the whole block leaves
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, dims.dv, Pass::backward));
  const Slice in{q, k, v, beta, alpha, sc.b, dims.n, dims.dk, dims.dv, 0, dims.dv, cfg.reverse, cfg.erase};
  const int64_t state = dims.dk * dims.dv;
  const Factors f = factors_of(workspace, dims, subs, c, sc.b, true);  // read only here
  const float *s0 = f.state(sc.slot), *ds = f.grad(sc.slot);
  load_state(nullptr, m.s0h, s0, in, m.l);
  load_state(nullptr, m.dsh, ds, in, m.l);
  float part = 0.0f;  // this thread's share of <S0, dS>, in f32 from the f32 states
  for (int64_t e = threadIdx.x; e < state; e += blockDim.x) part += s0[e] * ds[e];
  // load_rows' barrier in backward_sub_chunk orders these loads before their first use.
  backward_sub_chunk(m, in, sc.u0, sc.L, d_out, part, grads);
}

// A grid of `count` blocks, which must fit one dimension of it.
unsigned grid_of(int64_t count, const char* kernel) {
  constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
  TARN_CHECK(count <= kMaxGridX, "delta_rule_bf16 ", kernel, ": ", count, " blocks exceed one grid");
  return static_cast<unsigned>(count);
}

void check_dims(const char* op, const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  TARN_CHECK(d.slices >= 0 && d.n >= 0 && d.dk > 0 && d.dv > 0, op, ": bad dims slices ", d.slices, " n ", d.n,
             " dk ", d.dk, " dv ", d.dv);
  TARN_CHECK(cfg.chunk >= 1, op, ": chunk must be >= 1, got ", cfg.chunk);
}

// kernels/delta_rule.h's delta_rule_checkpoints (the CPU library is not linked here).
int64_t checkpoints_per_slice(const DeltaRuleDims& d, const DeltaRuleConfig& cfg) {
  return std::max<int64_t>(0, (d.n + cfg.chunk - 1) / cfg.chunk - 1);
}

size_t bytes_of(int64_t c, int64_t dk, int64_t cols, Pass pass) { return layout(c, dk, cols, pass).bytes; }

}  // namespace

int64_t delta_rule_bf16_sub_chunk(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  // The opt-in limit counts static shared memory too: block_sum's 32 partial sums.
  constexpr size_t kStaticSmem = 32 * sizeof(float);
  const size_t limit = static_cast<size_t>(device::max_dynamic_smem()) - kStaticSmem;
  const int64_t cols = std::min(kColumnTile, dims.dv);
  for (int64_t c : kSubChunks) {
    const int64_t used = std::min(c, cfg.chunk);
    const size_t most = std::max({bytes_of(used, dims.dk, dims.dv, Pass::factors),
                                  bytes_of(used, dims.dk, cols, Pass::states),
                                  bytes_of(used, dims.dk, dims.dv, Pass::outputs),
                                  bytes_of(used, dims.dk, cols, Pass::state_gradients),
                                  bytes_of(used, dims.dk, dims.dv, Pass::backward)});
    if (most <= limit) return used;
  }
  return 0;
}

namespace {
// The sub-chunk for these dims, or a throw naming what does not fit.
int64_t sub_chunk_or_throw(const char* op, const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t c = TARN_CUDA_NS::delta_rule_bf16_sub_chunk(dims, cfg);
  TARN_CHECK(c > 0, op, ": dk ", dims.dk, " dv ", dims.dv, " do not fit the shared memory of a sub-chunk of 16");
  return c;
}
}  // namespace

size_t delta_rule_bf16_forward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t c = sub_chunk_or_throw("delta_rule_bf16_forward_workspace_floats", dims, cfg);
  return static_cast<size_t>(dims.slices * sub_chunks(dims, cfg, c).slots * slot_floats(dims, c, false));
}

size_t delta_rule_bf16_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t c = sub_chunk_or_throw("delta_rule_bf16_backward_workspace_floats", dims, cfg);
  return static_cast<size_t>(dims.slices * sub_chunks(dims, cfg, c).slots * slot_floats(dims, c, true));
}

namespace {
// Every sub-chunk's factors into the workspace (forward, or with T for the backward).
void launch_factors(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, int64_t c, const bf16* q, const bf16* k,
                    const bf16* v, const float* beta, const float* alpha, float* workspace, bool backward) {
  const int64_t blocks = dims.slices * sub_chunks(dims, cfg, c).slots;
  if (blocks == 0) return;
  const size_t smem = bytes_of(c, dims.dk, dims.dv, Pass::factors);
  device::allow_dynamic_smem(delta_rule_bf16_factors_kernel, smem);
  tarn::launch(delta_rule_bf16_factors_kernel, grid_of(blocks, "factors"), kThreads, smem, nullptr, dims, cfg, c, q, k,
               v, beta, alpha, workspace, backward);
}
}  // namespace

void delta_rule_bf16_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const ::tarn::bf16* q,
                             const ::tarn::bf16* k, const ::tarn::bf16* v, const float* beta, const float* alpha,
                             ::tarn::bf16* out, float* final_state, float* checkpoints, float* workspace,
                             size_t workspace_floats) {
  const char* op = "delta_rule_bf16_forward";
  check_dims(op, dims, cfg);
  TARN_CHECK((q == nullptr) == (out == nullptr), op, ": q and out go together");
  if (dims.slices == 0) return;
  TARN_CHECK(workspace_floats >= TARN_CUDA_NS::delta_rule_bf16_forward_workspace_floats(dims, cfg), op,
             ": workspace too small");
  const int64_t c = sub_chunk_or_throw(op, dims, cfg);
  const int64_t cols = std::min(kColumnTile, dims.dv);
  launch_factors(dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha, workspace, false);
  const size_t pass_smem = bytes_of(c, dims.dk, cols, Pass::states);
  device::allow_dynamic_smem(delta_rule_bf16_state_pass_kernel, pass_smem);
  tarn::launch(delta_rule_bf16_state_pass_kernel, grid_of(dims.slices * column_tiles(dims.dv), "state pass"),
               kThreads, pass_smem, nullptr, dims, cfg, c, device_bf16(k), alpha, workspace, false, q != nullptr,
               final_state, checkpoints, nullptr, checkpoints_per_slice(dims, cfg));
  const int64_t blocks = dims.slices * sub_chunks(dims, cfg, c).slots;
  if (q == nullptr || blocks == 0) return;
  const size_t smem = bytes_of(c, dims.dk, dims.dv, Pass::outputs);
  device::allow_dynamic_smem(delta_rule_bf16_outputs_kernel, smem);
  tarn::launch(delta_rule_bf16_outputs_kernel, grid_of(blocks, "outputs"), kThreads, smem, nullptr, dims, cfg, c,
               device_bf16(q), alpha, workspace, device_bf16(out));
}

void delta_rule_bf16_backward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const ::tarn::bf16* q,
                              const ::tarn::bf16* k, const ::tarn::bf16* v, const float* beta, const float* alpha,
                              const float* checkpoints, const ::tarn::bf16* d_out, const float* d_final_state,
                              ::tarn::bf16* dq, ::tarn::bf16* dk, ::tarn::bf16* dv, float* d_beta, float* d_alpha,
                              float* workspace, size_t workspace_floats) {
  const char* op = "delta_rule_bf16_backward";
  check_dims(op, dims, cfg);
  TARN_CHECK((q == nullptr) == (d_out == nullptr) && (q == nullptr) == (dq == nullptr), op,
             ": q, d_out and dq go together");
  if (dims.slices == 0 || dims.n == 0) return;  // no rows to write
  TARN_CHECK(workspace_floats >= TARN_CUDA_NS::delta_rule_bf16_backward_workspace_floats(dims, cfg), op,
             ": workspace too small");
  const int64_t c = sub_chunk_or_throw(op, dims, cfg);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t tiled = dims.slices * column_tiles(dims.dv), cols = std::min(kColumnTile, dims.dv);
  launch_factors(dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha, workspace, true);
  // The state before every sub-chunk, each checkpoint's chunk at once.
  const size_t pass_smem = bytes_of(c, dims.dk, cols, Pass::states);
  device::allow_dynamic_smem(delta_rule_bf16_state_pass_kernel, pass_smem);
  tarn::launch(delta_rule_bf16_state_pass_kernel, grid_of(tiled * subs.chunks, "state pass"), kThreads, pass_smem,
               nullptr, dims, cfg, c, device_bf16(k), alpha, workspace, true, true, nullptr, nullptr, checkpoints,
               checkpoints_per_slice(dims, cfg));
  const size_t tiled_smem = bytes_of(c, dims.dk, cols, Pass::state_gradients);
  device::allow_dynamic_smem(delta_rule_bf16_state_gradients_kernel, tiled_smem);
  tarn::launch(delta_rule_bf16_state_gradients_kernel, grid_of(tiled, "state gradients"), kThreads, tiled_smem,
               nullptr, dims, cfg, c, device_bf16(q), device_bf16(k), beta, alpha, device_bf16(d_out), d_final_state,
               workspace);
  const size_t smem = bytes_of(c, dims.dk, dims.dv, Pass::backward);
  device::allow_dynamic_smem(delta_rule_bf16_backward_kernel, smem);
  const Gradients grads{device_bf16(dq), device_bf16(dk), device_bf16(dv), d_beta, d_alpha};
  tarn::launch(delta_rule_bf16_backward_kernel, grid_of(dims.slices * subs.slots, "backward"), kThreads, smem, nullptr,
               dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha, device_bf16(d_out), grads,
               workspace);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
