// The register-blocked tile GEMM and the padded copies behind the CPU attention kernels
// (see linear_attention_simd.h for why they are ours and not OpenBLAS').
#include "kernels/cpu/linear_attention_simd.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
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

// One-vector tiles go up to 8 rows (8 + 2 registers), also under the AVX-512 plan below.
constexpr int kRowsOneVec = kRows > 8 ? kRows : 8;

// The build ISA's tile for `rows` rows and nv vectors (nv = kVecs: rows <= kRows;
// nv = 1: rows <= kRowsOneVec).
TileFn portable_tile(int rows, int nv) {
  static constexpr auto wide = tile_table<kVecs>(std::make_integer_sequence<int, kRows>());
  static constexpr auto narrow = tile_table<1>(std::make_integer_sequence<int, kRowsOneVec>());
  return nv == kVecs ? wide[rows - 1] : narrow[rows - 1];
}

// How a gemm covers C: row blocks of `rows`, and per column panel the tile and its width.
struct Plan {
  int rows;
  TileFn (*pick)(int rows, int64_t cols_left, int64_t* cols);
};

TileFn portable_pick(int rows, int64_t cols_left, int64_t* cols) {
  const bool wide = cols_left >= kVecs * kLanes;  // N is a multiple of kLanes
  *cols = wide ? kVecs * kLanes : kLanes;
  return portable_tile(rows, wide ? kVecs : 1);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX512F__)
#define TARN_AVX512_TILES 1
// AVX-512 tiles for a build that leaves AVX-512 off (CMakeLists.txt: GCC 12.2 miscompiles
// some AVX-512 constant initialisers). Only these functions are compiled for AVX-512 and
// only when the CPU has it: they hold no vector constants but zero, and the kernel tests
// check them against double-precision references and against the AVX2 tiles
// (tests/attention/tile_gemm_test.cpp). On Zen 5 they double the tile throughput.
namespace avx512 {

constexpr int kLanes16 = 16;
constexpr int kRows16 = 8;  // 8 x 2 accumulators + 2 operands + 1 broadcast of 32 zmm
typedef float V16 __attribute__((vector_size(kLanes16 * sizeof(float))));

template <int R, int NV>
__attribute__((target("avx512f"))) void tile16(int64_t k0, int64_t k1, const float* a,
                                               int64_t a_rs, int64_t a_ks, const float* b,
                                               int64_t ldb, float* c, int64_t ldc,
                                               bool accumulate) {
  V16 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = V16{};
      if (accumulate) __builtin_memcpy(&acc[r][v], c + r * ldc + v * kLanes16, sizeof(V16));
    }
  for (int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    V16 bv[NV];
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&bv[v], bk + v * kLanes16, sizeof(V16));
    const float* ak = a + k * a_ks;
    for (int r = 0; r < R; ++r) {
      const V16 ar = ak[r * a_rs] - V16{};  // one broadcast load
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) __builtin_memcpy(c + r * ldc + v * kLanes16, &acc[r][v], sizeof(V16));
}

template <int NV, int... R>
constexpr std::array<TileFn, sizeof...(R)> table16(std::integer_sequence<int, R...>) {
  return {tile16<R + 1, NV>...};
}

TileFn pick(int rows, int64_t cols_left, int64_t* cols) {
  static constexpr auto two = table16<2>(std::make_integer_sequence<int, kRows16>());
  static constexpr auto one = table16<1>(std::make_integer_sequence<int, kRows16>());
  if (cols_left >= 2 * kLanes16) {
    *cols = 2 * kLanes16;
    return two[rows - 1];
  }
  if (cols_left >= kLanes16) {
    *cols = kLanes16;
    return one[rows - 1];
  }
  *cols = kLanes;  // a last kLanes-wide panel: the build ISA's one-vector tile
  return portable_tile(rows, 1);
}

}  // namespace avx512
#endif

std::atomic<bool>& avx512_switch() {
#ifdef TARN_AVX512_TILES
  static std::atomic<bool> on{__builtin_cpu_supports("avx512f") && !std::getenv("TARN_NO_AVX512")};
#else
  static std::atomic<bool> on{false};
#endif
  return on;
}

Plan current_plan() {
#ifdef TARN_AVX512_TILES
  if (avx512_switch().load(std::memory_order_relaxed)) return {avx512::kRows16, avx512::pick};
#endif
  return {kRows, portable_pick};
}

}  // namespace

bool avx512_tiles_available() {
#ifdef TARN_AVX512_TILES
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool avx512_tiles_enabled() { return avx512_switch().load(); }

bool set_avx512_tiles(bool on) {
  return avx512_switch().exchange(on && avx512_tiles_available());
}

void gemm(int64_t M, int64_t N, int64_t K, MatA a, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool accumulate, Tri tri) {
  const Plan plan = current_plan();
  // Column panels outermost: one K x panel slice of B stays in L1 while A streams past.
  int64_t cols = 0;
  for (int64_t j = 0; j < N; j += cols) {
    plan.pick(1, N - j, &cols);  // the panel width (the same for every row count)
    for (int64_t i = 0; i < M; i += plan.rows) {
      const int rows = static_cast<int>(std::min<int64_t>(plan.rows, M - i));
      int64_t k0 = 0, k1 = K, unused = 0;
      if (tri == Tri::lower_out && j > i + rows - 1) continue;  // all above the diagonal
      if (tri == Tri::lower_k) k1 = std::min<int64_t>(K, i + rows);
      if (tri == Tri::upper_k) k0 = std::min<int64_t>(K, i);
      const TileFn fn = plan.pick(rows, N - j, &unused);
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
