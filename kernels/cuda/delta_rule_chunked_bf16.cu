// The gated delta rule's chunked scan in bf16 (kernels/cuda_delta_rule_bf16.h): the algorithm,
// formulas and work split of kernels/cuda/delta_rule_chunked.cu (its header comment derives
// them), with every matrix product of a sub-chunk on tensor cores (kernels/cuda/mma.cuh: bf16
// operands, f32 accumulators) and the rest in f32 on the CUDA cores:
//
//   tensor cores   K K^T, Q K^T, K S0, Q S0, W = X R, P W, S += K^T diag(e) W (forward);
//                  K dS, P^T dout, dS0 += Q^T diag(b) dout - K^T diag(b beta) dY, dY W^T,
//                  dout W^T, dq = diag(b) dout S0^T + (D o dP) K and
//                  dk = (D o dP)^T Q + (dKK + dKK^T) K - diag(b beta) dY S0^T + diag(e) W dS^T
//   CUDA cores     the decays D, A and P elementwise, the forward substitution X = (I + A)^-1
//                  diag(beta) and the back substitution (I + A)^T dY = dW (a column a thread, f32),
//                  d_beta, d_alpha and the decays' gradient G
//
// A product's operands are bf16 copies in shared memory, zero-padded to 16-multiples of rows
// and columns (a sub-chunk of L tokens sits in c = round16(L) rows; dk and the block's value
// columns round up alike), so padded rows and columns contribute exact zeros. Row scalings that
// feed a product (diag(b), diag(e), diag(b beta)) are folded into its bf16 operand; those of a
// result are applied in f32 after it. The state stays f32 in shared memory (the tensor cores
// accumulate onto it) and is rounded to bf16 only as an operand.
//
// Kernels as in the f32 file: the forward a block per (slice, tile of 16 state columns); the
// backward's (1) states from the checkpoints and (2) state gradients per (slice, column tile),
// and (3) per (slice, sub-chunk) over the whole state. Each 16x16 output tile has one warp and
// sums its terms in a fixed order, each f32 element one thread: the same bits on every run.
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
using delta_chunked::Workspace;
using delta_chunked::workspace_of;

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
enum class Pass { forward, state_gradients, backward };

// Byte offsets of a block's buffers (kAbsent where its kernel has none), for sub-chunks of at
// most `tokens` tokens, dk and `cols` state columns (dv in kernel 3, a tile's width elsewhere).
// Names ending in h are bf16 operands.
struct Layout {
  int c, dk, cols;              // padded to 16: rows of a sub-chunk, key width, value columns
  int ldk, ldv, ldc;            // bf16 leading dimensions of rows of dk, cols, c elements
  int fk, fv, fc, fd;           // f32 leading dimensions (fd: D and G, columns -1 .. c - 1)
  size_t kh, qh, s0h, dsh, rh, xh, ph, wh, douth, bdouth, ybh, dyh, dqkh, mh;
  size_t state, r, w, ks0, qs0, tmp, dy, dqo, dko, kk, qk, a, x, dyw, dow, d, g, beta, alpha, de;
  size_t bytes;  // with mma::kSharedSlack for aligning the start
};

__host__ __device__ inline Layout layout(int64_t tokens, int64_t dk, int64_t cols, Pass pass) {
  Layout l{};
  l.c = static_cast<int>(round16(tokens));
  l.dk = static_cast<int>(round16(dk));
  l.cols = static_cast<int>(round16(cols));
  l.ldk = l.dk + kPadBf16, l.ldv = l.cols + kPadBf16, l.ldc = l.c + kPadBf16;
  l.fk = l.dk + kPadF32, l.fv = l.cols + kPadF32, l.fc = l.c + kPadF32, l.fd = l.c + 1;
  const bool F = pass == Pass::forward, G = pass == Pass::state_gradients, B = pass == Pass::backward;
  const size_t h = sizeof(bf16), f = sizeof(float);
  const size_t rows_k = static_cast<size_t>(l.c), state_rows = static_cast<size_t>(l.dk);
  size_t at = 0;
  auto take = [&at](size_t bytes, bool needed) {
    if (!needed) return kAbsent;
    const size_t o = at;
    at += round128(bytes);
    return o;
  };
  l.kh = take(h * rows_k * l.ldk, true);
  l.qh = take(h * rows_k * l.ldk, true);
  l.s0h = take(h * state_rows * l.ldv, F || B);
  l.dsh = take(h * state_rows * l.ldv, G || B);
  l.rh = take(h * rows_k * l.ldv, F || B);  // R, then diag(e) W
  l.xh = take(h * rows_k * l.ldc, F || B);
  l.ph = take(h * rows_k * l.ldc, true);
  l.wh = take(h * rows_k * l.ldv, F || B);
  l.douth = take(h * rows_k * l.ldv, G || B);
  l.bdouth = take(h * rows_k * l.ldv, G || B);
  l.ybh = take(h * rows_k * l.ldv, G || B);
  l.dyh = take(h * rows_k * l.ldv, B);
  l.dqkh = take(h * rows_k * l.ldc, B);
  l.mh = take(h * rows_k * l.ldc, B);
  l.state = take(f * state_rows * l.fv, F || G);  // S (forward), dS (state gradients)
  l.r = take(f * rows_k * l.fv, F || B);
  l.w = take(f * rows_k * l.fv, F || B);
  l.ks0 = take(f * rows_k * l.fv, F || B);
  l.qs0 = take(f * rows_k * l.fv, F || B);
  l.tmp = take(f * rows_k * l.fv, true);  // P W (forward), K dS (backward; kernel 3: then (K dS) o W)
  l.dy = take(f * rows_k * l.fv, G || B);
  l.dqo = take(f * rows_k * l.fk, B);
  l.dko = take(f * rows_k * l.fk, B);
  l.kk = take(f * rows_k * l.fc, true);
  l.qk = take(f * rows_k * l.fc, true);
  l.a = take(f * rows_k * l.fc, true);
  l.x = take(f * rows_k * l.fc, F || B);
  // Kernel 3's dY W^T and dout W^T reuse X (spent once W = X R is formed) and A (spent after
  // the back substitution): both products come after those, past a barrier. At dk = dv = 64
  // this keeps 32-token sub-chunks within sm_80's 163 KiB.
  l.dyw = B ? l.x : kAbsent;
  l.dow = B ? l.a : kAbsent;
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
  bf16 *kh, *qh, *s0h, *dsh, *rh, *xh, *ph, *wh, *douth, *bdouth, *ybh, *dyh, *dqkh, *mh;
  float *state, *r, *w, *ks0, *qs0, *tmp, *dy, *dqo, *dko, *kk, *qk, *a, *x, *dyw, *dow, *d, *g, *beta, *alpha, *de;
  __device__ Smem(unsigned char* base, const Layout& lay) : l(lay) {
    auto hp = [base](size_t o) { return o == kAbsent ? nullptr : reinterpret_cast<bf16*>(base + o); };
    auto fp = [base](size_t o) { return o == kAbsent ? nullptr : reinterpret_cast<float*>(base + o); };
    kh = hp(l.kh), qh = hp(l.qh), s0h = hp(l.s0h), dsh = hp(l.dsh), rh = hp(l.rh), xh = hp(l.xh), ph = hp(l.ph);
    wh = hp(l.wh), douth = hp(l.douth), bdouth = hp(l.bdouth), ybh = hp(l.ybh), dyh = hp(l.dyh);
    dqkh = hp(l.dqkh), mh = hp(l.mh);
    state = fp(l.state), r = fp(l.r), w = fp(l.w), ks0 = fp(l.ks0), qs0 = fp(l.qs0), tmp = fp(l.tmp), dy = fp(l.dy);
    dqo = fp(l.dqo), dko = fp(l.dko), kk = fp(l.kk), qk = fp(l.qk), a = fp(l.a), x = fp(l.x), dyw = fp(l.dyw);
    dow = fp(l.dow), d = fp(l.d), g = fp(l.g), beta = fp(l.beta), alpha = fp(l.alpha), de = fp(l.de);
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
__device__ void load_rows(const Smem& m, const Slice& in, int64_t u0, int64_t L, bool values) {
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
__device__ void load_d_out(const Smem& m, const Slice& in, int64_t u0, int64_t L, const bf16* d_out) {
  const Layout& l = m.l;
  for (int64_t e = threadIdx.x; e < int64_t{l.c} * l.cols; e += blockDim.x) {
    const int64_t t = e / l.cols, j = e % l.cols;
    const bool valid = d_out != nullptr && t < L && j < in.cols;
    m.douth[t * l.ldv + j] = valid ? d_out[in.row(u0 + t) * in.dv + in.j0 + j] : mma::to_bf16(0.0f);
  }
}

// The block's columns of a state in global memory (null: zero) into f32 `tile` (may be null)
// and its bf16 copy, zero-padded.
__device__ void load_state(float* tile, bf16* copy, const float* from, const Slice& in, const Layout& l) {
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x) {
    const int64_t i = e / l.cols, j = e % l.cols;
    const float s = from != nullptr && i < in.dk && j < in.cols ? from[i * in.dv + in.j0 + j] : 0.0f;
    if (tile != nullptr) tile[i * l.fv + j] = s;
    copy[i * l.ldv + j] = mma::to_bf16(s);
  }
}
__device__ void store_state(float* to, const float* tile, const Slice& in, const Layout& l) {
  for (int64_t e = threadIdx.x; e < in.dk * in.cols; e += blockDim.x) {
    const int64_t i = e / in.cols, j = e % in.cols;
    to[i * in.dv + in.j0 + j] = tile[i * l.fv + j];
  }
}
// The bf16 copy of the f32 state tile.
__device__ void round_state(bf16* copy, const float* tile, const Layout& l) {
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x) {
    const int64_t i = e / l.cols, j = e % l.cols;
    copy[i * l.ldv + j] = mma::to_bf16(tile[i * l.fv + j]);
  }
}

// ---- The sub-chunk's CUDA-core steps ----

// D, a row a thread: running products of alpha from the diagonal leftwards.
__device__ void decays(const Smem& m, int64_t L) {
  for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
    float p = 1.0f;
    m.D(t, t) = 1.0f;
    for (int64_t s = t - 1; s >= -1; --s) {
      p *= m.alpha[s + 1];
      m.D(t, s) = p;
    }
    for (int64_t s = t + 1; s < L; ++s) m.D(t, s) = 0.0f;
  }
}

// A = beta_t D_ts (k_t . k_s) below the diagonal (erase) and P = D o (Q K^T) on and below it
// as bf16 (readout), from the products in kk and qk, over the whole padded c x c.
__device__ void pairs(const Smem& m, int64_t L, bool erase, bool readout) {
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
__device__ void pair_products(const Smem& m, bool erase, bool readout) {
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

// One sub-chunk forward from the block's columns of the state (m.state, f32, and m.s0h), which
// it advances; their columns of out's rows when reading out. Starts and ends with every thread
// past a barrier.
__device__ void forward_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, bf16* out) {
  const Layout& l = m.l;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_rows(m, in, u0, L, true);
  __syncthreads();
  decays(m, L);
  writes_from_state(m, L, erase, readout, false);
  // The state decays by b_{L-1}.
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x)
    m.state[(e / l.cols) * l.fv + e % l.cols] *= decay;
  __syncthreads();
  if (readout) product(m.tmp, l.fv, l.c, l.cols, one(rows_of(m.ph, l.ldc), rows_of(m.wh, l.ldv), l.c), false);
  product(m.state, l.fv, l.dk, l.cols, one(transpose_of(m.kh, l.ldk), rows_of(m.rh, l.ldv), l.c), true);
  __syncthreads();
  if (readout)  // out = diag(b) Q S0 + P W
    for (int64_t e = threadIdx.x; e < L * in.cols; e += blockDim.x) {
      const int64_t t = e / in.cols, j = e % in.cols;
      const float o = m.D(t, -1) * m.cv(m.qs0, t, j) + m.cv(m.tmp, t, j);
      out[in.row(u0 + t) * in.dv + in.j0 + j] = mma::to_bf16(o);
    }
  round_state(m.s0h, m.state, l);
  __syncthreads();
}

// The slice and column tile of a tiled kernel's block number `block` (slice-major).
__device__ Slice tiled_slice(int64_t block, const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const bf16* q,
                             const bf16* k, const bf16* v, const float* beta, const float* alpha) {
  const int64_t tiles = column_tiles(dims.dv), b = block / tiles, tile = block % tiles;
  return {q,       k,       v,       beta, alpha, b, dims.n, dims.dk, dims.dv, tile * kColumnTile,
          smaller(kColumnTile, dims.dv - tile * kColumnTile), cfg.reverse, cfg.erase};
}

// A block per (slice, column tile): the whole scan over its columns.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_forward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q, const bf16* k,
                                   const bf16* v, const float* beta, const float* alpha, bf16* out, float* final_state,
                                   float* checkpoints, int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const Slice in = tiled_slice(blockIdx.x, dims, cfg, q, k, v, beta, alpha);
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, in.cols, Pass::forward));
  const int64_t state = dims.dk * dims.dv, b = in.b;
  load_state(m.state, m.s0h, nullptr, in, m.l);
  __syncthreads();
  for (int64_t t0 = 0; t0 < dims.n; t0 += cfg.chunk) {
    if (checkpoints != nullptr && t0 > 0)
      store_state(checkpoints + (b * per_slice_checkpoints + t0 / cfg.chunk - 1) * state, m.state, in, m.l);
    const int64_t t1 = smaller(dims.n, t0 + cfg.chunk);
    for (int64_t u0 = t0; u0 < t1; u0 += c) forward_sub_chunk(m, in, u0, smaller(c, t1 - u0), out);
  }
  if (final_state != nullptr) store_state(final_state + b * state, m.state, in, m.l);
}

// Backward kernel 1, a block per (slice, column tile, chunk) where a chunk has several
// sub-chunks: the state before each of its later sub-chunks, recomputed from the checkpoint.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_states_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* k, const bf16* v,
                                  const float* beta, const float* alpha, const float* checkpoints, float* workspace,
                                  int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t ci = blockIdx.x % subs.chunks, state = dims.dk * dims.dv;
  const Slice in = tiled_slice(blockIdx.x / subs.chunks, dims, cfg, nullptr, k, v, beta, alpha);  // no readout
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, in.cols, Pass::forward));
  const Workspace ws = workspace_of(workspace, in.b, subs.slots, state);
  const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
  load_state(m.state, m.s0h, ci == 0 ? nullptr : checkpoints + (in.b * per_slice_checkpoints + ci - 1) * state, in,
             m.l);
  __syncthreads();
  for (int64_t u = 1; t0 + u * c < t1; ++u) {
    forward_sub_chunk(m, in, t0 + (u - 1) * c, c, nullptr);
    store_state(ws.states + (ci * subs.per_chunk + u) * state, m.state, in, m.l);
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
__device__ void scaled_gradients(const Smem& m, int64_t L, bool erase, bool readout) {
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
// dS0 = b_{L-1} dS + Q^T diag(b) dout - K^T diag(b beta) dY.
__device__ void state_gradient_sub_chunk(const Smem& m, const Slice& in, int64_t u0, int64_t L, const bf16* d_out) {
  const Layout& l = m.l;
  const bool readout = in.q != nullptr, erase = in.erase;
  load_rows(m, in, u0, L, false);
  load_d_out(m, in, u0, L, readout ? d_out : nullptr);
  __syncthreads();
  decays(m, L);
  pair_products(m, erase, readout);
  product(m.tmp, l.fv, l.c, l.cols, one(rows_of(m.kh, l.ldk), rows_of(m.dsh, l.ldv), l.dk), false);  // K dS
  __syncthreads();
  pairs(m, L, erase, readout);
  __syncthreads();
  write_gradients(m, L, erase, readout);
  scaled_gradients(m, L, erase, readout);
  const float decay = m.D(L - 1, -1);
  for (int64_t e = threadIdx.x; e < int64_t{l.dk} * l.cols; e += blockDim.x)
    m.state[(e / l.cols) * l.fv + e % l.cols] *= decay;
  __syncthreads();
  Terms terms;
  if (readout) terms.add(transpose_of(m.qh, l.ldk), rows_of(m.bdouth, l.ldv), l.c);
  if (erase) terms.add(transpose_of(m.kh, l.ldk), rows_of(m.ybh, l.ldv), l.c);
  product(m.state, l.fv, l.dk, l.cols, terms, true);
  __syncthreads();
  round_state(m.dsh, m.state, l);
  __syncthreads();
}

// Backward kernel 2, a block per (slice, column tile): the gradient of the state after each
// sub-chunk, walking them in reverse from d_final_state.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_state_gradients_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q,
                                           const bf16* k, const bf16* v, const float* beta, const float* alpha,
                                           const bf16* d_out, const float* d_final_state, float* workspace) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const Slice in = tiled_slice(blockIdx.x, dims, cfg, q, k, v, beta, alpha);
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, in.cols, Pass::state_gradients));
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t state = dims.dk * dims.dv;
  const Workspace ws = workspace_of(workspace, in.b, subs.slots, state);
  load_state(m.state, m.dsh, d_final_state != nullptr ? d_final_state + in.b * state : nullptr, in, m.l);
  for (int64_t ci = subs.chunks - 1; ci >= 0; --ci) {
    const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk);
    for (int64_t u = (t1 - t0 + c - 1) / c - 1; u >= 0; --u) {
      __syncthreads();  // m.state is written
      store_state(ws.grads + (ci * subs.per_chunk + u) * state, m.state, in, m.l);
      if (ci == 0 && u == 0) break;  // the scan starts from zero: nothing reads dS before it
      const int64_t u0 = t0 + u * c;
      state_gradient_sub_chunk(m, in, u0, smaller(c, t1 - u0), d_out);
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
  decays(m, L);
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
  Terms dk_terms;
  dk_terms.add(rows_of(m.rh, l.ldv), transpose_of(m.dsh, l.ldv), l.cols);  // diag(e) W dS^T
  if (readout) dk_terms.add(transpose_of(m.dqkh, l.ldc), rows_of(m.qh, l.ldk), l.c);
  if (erase) {
    dk_terms.add(rows_of(m.mh, l.ldc), rows_of(m.kh, l.ldk), l.c);
    dk_terms.add(rows_of(m.ybh, l.ldv), transpose_of(m.s0h, l.ldv), l.cols);
  }
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

// Backward kernel 3, a block per (slice, sub-chunk slot), every sub-chunk at once.
__global__ void __launch_bounds__(kThreads)
    delta_rule_bf16_backward_kernel(DeltaRuleDims dims, DeltaRuleConfig cfg, int64_t c, const bf16* q, const bf16* k,
                                    const bf16* v, const float* beta, const float* alpha, const float* checkpoints,
                                    const bf16* d_out, Gradients grads, float* workspace,
                                    int64_t per_slice_checkpoints) {
  TARN_DYNAMIC_SHARED(unsigned char, smem_unaligned);
  const SubChunks subs = sub_chunks(dims, cfg, c);
  const int64_t b = blockIdx.x / subs.slots, slot = blockIdx.x % subs.slots;
  const int64_t ci = slot / subs.per_chunk, u = slot % subs.per_chunk;
  const int64_t t0 = ci * cfg.chunk, t1 = smaller(dims.n, t0 + cfg.chunk), u0 = t0 + u * c;
  if (u0 >= t1) return;  // an empty slot of the last chunk: the whole block leaves
  const Smem m(mma::align_shared(smem_unaligned), layout(c, dims.dk, dims.dv, Pass::backward));
  const Slice in{q, k, v, beta, alpha, b, dims.n, dims.dk, dims.dv, 0, dims.dv, cfg.reverse, cfg.erase};
  const int64_t state = dims.dk * dims.dv;
  const Workspace ws = workspace_of(workspace, b, subs.slots, state);  // read only here
  const float* s0 = u > 0 ? ws.states + slot * state
                          : ci == 0 ? nullptr : checkpoints + (b * per_slice_checkpoints + ci - 1) * state;
  const float* ds = ws.grads + slot * state;
  load_state(nullptr, m.s0h, s0, in, m.l);
  load_state(nullptr, m.dsh, ds, in, m.l);
  float part = 0.0f;  // this thread's share of <S0, dS>, in f32 from the f32 states
  if (s0 != nullptr)
    for (int64_t e = threadIdx.x; e < state; e += blockDim.x) part += s0[e] * ds[e];
  // load_rows' barrier in backward_sub_chunk orders these loads before their first use.
  backward_sub_chunk(m, in, u0, smaller(c, t1 - u0), d_out, part, grads);
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
    const size_t most = std::max({bytes_of(used, dims.dk, cols, Pass::forward),
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

size_t delta_rule_bf16_backward_workspace_floats(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg) {
  const int64_t c = sub_chunk_or_throw("delta_rule_bf16_backward_workspace_floats", dims, cfg);
  return static_cast<size_t>(dims.slices * 2 * sub_chunks(dims, cfg, c).slots * dims.dk * dims.dv);
}

void delta_rule_bf16_forward(const DeltaRuleDims& dims, const DeltaRuleConfig& cfg, const ::tarn::bf16* q,
                             const ::tarn::bf16* k, const ::tarn::bf16* v, const float* beta, const float* alpha,
                             ::tarn::bf16* out, float* final_state, float* checkpoints) {
  const char* op = "delta_rule_bf16_forward";
  check_dims(op, dims, cfg);
  TARN_CHECK((q == nullptr) == (out == nullptr), op, ": q and out go together");
  if (dims.slices == 0) return;
  const int64_t c = sub_chunk_or_throw(op, dims, cfg);
  const size_t smem = bytes_of(c, dims.dk, std::min(kColumnTile, dims.dv), Pass::forward);
  device::allow_dynamic_smem(delta_rule_bf16_forward_kernel, smem);
  tarn::launch(delta_rule_bf16_forward_kernel, grid_of(dims.slices * column_tiles(dims.dv), "forward"), kThreads,
               smem, nullptr, dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha,
               device_bf16(out), final_state, checkpoints, checkpoints_per_slice(dims, cfg));
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
  const int64_t per_slice = checkpoints_per_slice(dims, cfg);
  if (subs.per_chunk > 1) {
    const size_t smem = bytes_of(c, dims.dk, cols, Pass::forward);
    device::allow_dynamic_smem(delta_rule_bf16_states_kernel, smem);
    tarn::launch(delta_rule_bf16_states_kernel, grid_of(tiled * subs.chunks, "states"), kThreads, smem, nullptr,
                 dims, cfg, c, device_bf16(k), device_bf16(v), beta, alpha, checkpoints, workspace, per_slice);
  }
  const size_t tiled_smem = bytes_of(c, dims.dk, cols, Pass::state_gradients);
  device::allow_dynamic_smem(delta_rule_bf16_state_gradients_kernel, tiled_smem);
  tarn::launch(delta_rule_bf16_state_gradients_kernel, grid_of(tiled, "state gradients"), kThreads, tiled_smem,
               nullptr, dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha, device_bf16(d_out),
               d_final_state, workspace);
  const size_t smem = bytes_of(c, dims.dk, dims.dv, Pass::backward);
  device::allow_dynamic_smem(delta_rule_bf16_backward_kernel, smem);
  const Gradients grads{device_bf16(dq), device_bf16(dk), device_bf16(dv), d_beta, d_alpha};
  tarn::launch(delta_rule_bf16_backward_kernel, grid_of(dims.slices * subs.slots, "backward"), kThreads, smem,
               nullptr, dims, cfg, c, device_bf16(q), device_bf16(k), device_bf16(v), beta, alpha, checkpoints,
               device_bf16(d_out), grads, workspace, per_slice);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
