// The register-blocked tile GEMM and the padded copies behind the CPU attention kernels
// (see linear_attention_simd.h for why they are ours and not OpenBLAS').
#include "kernels/cpu/linear_attention_simd.h"

#include <algorithm>
#include <array>
#include <utility>

namespace tarn::kernels::cpu::simd {
namespace {

// One register tile: C[R x NV*kLanes] (=|+=) sum_{k in [k0, k1)} A(r, k) * B[k, :].
// R * NV accumulators + NV operand vectors + one broadcast stay in registers; per k it
// issues NV loads, R broadcasts and R * NV FMAs (FMA-bound at R = kRows, NV = kVecs).
template <int R, int NV>
inline void tile(int64_t k0, int64_t k1, const float* a, int64_t a_rs, int64_t a_ks,
                 const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? load(c + r * ldc + v * kLanes) : Vec{};
  for (int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load(bk + v * kLanes);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < R; ++r) {
      const Vec ar = splat(ak[r * a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(c + r * ldc + v * kLanes, acc[r][v]);
}

using TileFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                        float*, int64_t, bool);

template <int NV, int... R>
constexpr std::array<TileFn, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {tile<R + 1, NV>...};
}

// The tile for `rows` (1..kRows) rows: full tiles and the remainder rows of a block.
template <int NV>
TileFn tile_for_rows(int rows) {
  static constexpr auto table = tile_table<NV>(std::make_integer_sequence<int, kRows>());
  return table[rows - 1];
}

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, MatA a, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool accumulate, Tri tri) {
  constexpr int64_t kTileCols = kVecs * kLanes;
  // Column panels outermost: one K x kTileCols panel of B stays in L1 while A streams past.
  for (int64_t j = 0; j < N; j += kTileCols) {
    const bool wide = N - j >= kTileCols;  // N is a multiple of kLanes: the tail is one vector
    for (int64_t i = 0; i < M; i += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, M - i));
      int64_t k0 = 0, k1 = K;
      if (tri == Tri::lower_out && j > i + rows - 1) continue;  // all above the diagonal
      if (tri == Tri::lower_k) k1 = std::min<int64_t>(K, i + rows);
      if (tri == Tri::upper_k) k0 = std::min<int64_t>(K, i);
      const TileFn fn = wide ? tile_for_rows<kVecs>(rows) : tile_for_rows<1>(rows);
      fn(k0, k1, a.p + i * a.rs, a.rs, a.ks, b + j, ldb, c + i * ldc + j, ldc, accumulate);
    }
  }
}

void exp_shifted(const float* x, float shift, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, exp(load(x + i) - shift));
  for (; i < n; ++i) y[i] = exp(x[i] - shift);
}

namespace {

// 8 x 8 blocks through three rounds of shuffles (unpack, 64-bit shuffle, 128-bit permute),
// as 8-float vectors whatever kLanes is: a scalar transpose costs a load and a store per
// element and was ~10% of the backward scan.
typedef float V8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t M8 __attribute__((vector_size(8 * sizeof(int32_t))));

inline V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, V8 v) { std::memcpy(p, &v, sizeof v); }

void transpose8x8(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  V8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src + i * ld_src);
  const M8 lo32{0, 8, 1, 9, 4, 12, 5, 13}, hi32{2, 10, 3, 11, 6, 14, 7, 15};
  const M8 lo64{0, 1, 8, 9, 4, 5, 12, 13}, hi64{2, 3, 10, 11, 6, 7, 14, 15};
  const M8 lo128{0, 1, 2, 3, 8, 9, 10, 11}, hi128{4, 5, 6, 7, 12, 13, 14, 15};
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], lo32);
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi32);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shuffle(t[i], t[i + 2], lo64);
    u[i + 1] = __builtin_shuffle(t[i], t[i + 2], hi64);
    u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], lo64);
    u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], hi64);
  }
  for (int i = 0; i < 4; ++i) {
    store8(dst + i * ld_dst, __builtin_shuffle(u[i], u[i + 4], lo128));
    store8(dst + (i + 4) * ld_dst, __builtin_shuffle(u[i], u[i + 4], hi128));
  }
}

}  // namespace

void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
               int64_t ld_dst, int64_t pad_rows) {
  constexpr int64_t kBlock = 8;
  const int64_t rows8 = rows / kBlock * kBlock, cols8 = cols / kBlock * kBlock;
  for (int64_t r = 0; r < rows8; r += kBlock)
    for (int64_t c = 0; c < cols8; c += kBlock)
      transpose8x8(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
  // The ragged right and bottom edges, element by element.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
  if (pad_rows > rows)
    for (int64_t c = 0; c < cols; ++c)
      std::fill(dst + c * ld_dst + rows, dst + c * ld_dst + pad_rows, 0.0f);
}

void copy_padded(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                 int64_t ld_dst, int64_t pad_cols) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * ld_src, src + r * ld_src + cols, dst + r * ld_dst);
    std::fill(dst + r * ld_dst + cols, dst + r * ld_dst + pad_cols, 0.0f);
  }
}

void zero_rows(float* p, int64_t row_begin, int64_t row_end, int64_t ld, int64_t cols) {
  for (int64_t r = row_begin; r < row_end; ++r) std::fill(p + r * ld, p + r * ld + cols, 0.0f);
}

void mask_strict_upper(float* c, int64_t rows, int64_t cols, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i)
    if (i + 1 < cols) std::fill(c + i * ldc + i + 1, c + i * ldc + cols, 0.0f);
}

}  // namespace tarn::kernels::cpu::simd
