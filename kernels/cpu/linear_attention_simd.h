#pragma once
// SIMD building blocks shared by the CPU attention kernels (linear attention, softmax
// attention, feature maps): a vector type, a vectorisable exp, a register-blocked
// tile GEMM for the small per-chunk products of docs/design.md section 2, and padded copies.
//
// Why our own tile GEMM and not cblas_sgemm per chunk: the chunk products are tiny
// (C x d times d x e with C = d = e = 64), run inside an OpenMP region (so OpenBLAS runs one
// thread each), and half of them are triangular, which a tile GEMM can skip.
//
// The vector type is a GCC/Clang vector extension, not intrinsics, sized to the widest
// vectors the build enables: 8 floats (AVX2) in the project's default build, which turns
// AVX-512 off (CMakeLists.txt: GCC 12.2 miscompiles some AVX-512 constant initialisers),
// 16 floats when AVX-512 is on. The GEMM tiles alone also come as AVX-512 functions picked
// at run time (see gemm below): Zen 5, which this machine has, executes 512-bit FMAs at full
// width. Chunk-shaped products (64 x 64 x 65, one per thread, 2 threads): AVX-512 tiles
// 370 GFLOP/s, AVX2 tiles 206, OpenBLAS 220; causal forward+backward (B*H = 4, N = 4096,
// d = 64) 6.5 ms with them, 9.7 ms without (tools/bench/attention_bench).
#include <cstdint>
#include <cstring>

namespace tarn::kernels::cpu::simd {

#if defined(__AVX512F__)
constexpr int kLanes = 16;  // floats per vector (one zmm register)
constexpr int kRows = 8;    // rows of the GEMM register tile: 8 x 2 accumulators of 32
#else
constexpr int kLanes = 8;   // floats per vector (one ymm register)
constexpr int kRows = 6;    // 6 x 2 accumulators + 2 operands + 1 broadcast = 15 of 16 ymm
#endif
constexpr int kVecs = 2;    // vectors per tile row: the tile is kRows x (kVecs * kLanes)

typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t IVec __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
// x - 0 (not 0 + x, which GCC may not fold: 0 + -0 is +0) becomes one broadcast load.
inline Vec splat(float x) { return x - Vec{}; }

// Asks for [p, p + n) to be brought into L2 (not L1: the current chunk still lives there).
// The scans call it for the next chunk's rows: at N = 64K the tensors far exceed the caches,
// and the hardware prefetcher does not run far enough ahead of the tile GEMMs' strided reads.
inline void prefetch_l2(const float* p, int64_t n) {
  if (!p) return;
  for (int64_t i = 0; i < n; i += 64 / sizeof(float)) __builtin_prefetch(p + i, 0, 2);
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t padded(int64_t x) { return round_up(x, kLanes); }

// Horizontal sum and vectorised reductions (a plain float loop does not vectorise without
// -ffast-math: the compiler may not reorder the additions).
inline float hsum(Vec v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float dot(const float* x, const float* y, int64_t n) {
  Vec acc{};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc += load(x + k) * load(y + k);
  float s = hsum(acc);
  for (; k < n; ++k) s += x[k] * y[k];
  return s;
}
inline float sum(const float* x, int64_t n) {
  Vec acc{};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) acc += load(x + k);
  float s = hsum(acc);
  for (; k < n; ++k) s += x[k];
  return s;
}

// exp with ~1 ulp relative error (Cephes expf: range reduction by ln 2, degree-6 polynomial),
// written without calls or branches so that loops over it vectorise; glibc's expf does not
// vectorise without -ffast-math. Underflows to 0 below ln(FLT_MIN) (no denormals), returns
// +inf above ln(2^127.5), propagates NaN.
namespace detail {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpLo = -87.3365448f;   // ln(FLT_MIN)
constexpr float kExpHi = 88.3762626647949f;  // ln(2^127.5): 2^n stays finite
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// e^r on the reduced range |r| <= ln(2)/2, by Horner's rule from p = kP0: the same steps for a
// vector (p splatted) and for one float, so that the two exps agree lane by lane.
template <class T>
inline T exp_polynomial(T r, T p) {
  p = p * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  return p * (r * r) + r + 1.0f;
}
}  // namespace detail

inline Vec exp(Vec x) {
  using namespace detail;
  const Vec lo = splat(kExpLo), hi = splat(kExpHi);
  Vec xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const Vec n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  Vec r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const Vec p = exp_polynomial(r, splat(kP0));
  const IVec bits = (__builtin_convertvector(n, IVec) + 127) << 23;
  Vec y = p * (Vec)bits;  // same-size vector cast: a bit reinterpretation
  y = x < lo ? Vec{} : y;
  y = x > hi ? splat(__builtin_inff()) : y;
  return y;
}

// The same algorithm on one float (identical results lane by lane).
inline float exp(float x) {
  using namespace detail;
  if (x != x) return x;
  if (x < kExpLo) return 0.0f;
  if (x > kExpHi) return __builtin_inff();
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float p = exp_polynomial(r, kP0);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// y[i] = exp(x[i] - shift) for i < n (x and y may alias).
void exp_shifted(const float* x, float shift, float* y, int64_t n);

// Which part of a square operand or result is known to be zero, so that the GEMM can skip it
// (docs/design.md section 2: the intra-chunk products are masked triangles).
enum class Tri : uint8_t {
  none,
  lower_out,  // only C(i, j) with j <= i is wanted: tiles strictly above the diagonal are
              // skipped and left unwritten (the caller masks the result)
  lower_k,    // A(i, k) = 0 for k > i: row tile i sums k < i + tile rows only
  upper_k,    // A(i, k) = 0 for k < i: row tile i sums k >= i only
};

// A strided view of the left operand: A(i, k) = p[i * rs + k * ks], so A or A^T of a
// row-major buffer can be read without copying (its entries are broadcast, never loaded as
// vectors, so strides cost nothing).
struct MatA {
  const float* p;
  int64_t rs;
  int64_t ks;
};
inline MatA rows_of(const float* p, int64_t ld) { return {p, ld, 1}; }          // A
inline MatA transpose_of(const float* p, int64_t ld) { return {p, 1, ld}; }     // A^T

// C (M x N, row-major, ldc) = or += A (M x K) * B (K x N, row-major, ldb).
// N must be a multiple of kLanes (pad with zero columns). Single-threaded: callers run it
// on per-thread buffers inside their own parallel regions. When the build leaves AVX-512
// off but the CPU has it, the tiles run as AVX-512 functions (the only AVX-512 code in the
// project; TARN_NO_AVX512=1 in the environment or set_avx512_tiles(false) turns it off).
void gemm(int64_t M, int64_t N, int64_t K, MatA a, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool accumulate, Tri tri = Tri::none);

bool avx512_tiles_available();  // built in and supported by this CPU
bool avx512_tiles_enabled();
bool set_avx512_tiles(bool on);  // returns the previous setting; for tests and benchmarks

// dst (cols x rows, ld_dst) = src (rows x cols, ld_src)^T; dst columns [rows, pad_rows) are
// zeroed so the result can serve as a padded GEMM operand.
void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
               int64_t ld_dst, int64_t pad_rows);

// dst (rows x ld_dst) = src (rows x cols, ld_src) with columns [cols, pad_cols) zeroed.
void copy_padded(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                 int64_t ld_dst, int64_t pad_cols);

// Zeroes rows [row_begin, row_end) of a row-major buffer of width `cols`.
void zero_rows(float* p, int64_t row_begin, int64_t row_end, int64_t ld, int64_t cols);

// Zeroes C(i, j) for j > i, i < rows, j < cols: applies the causal mask M_C to a chunk tile.
void mask_strict_upper(float* c, int64_t rows, int64_t cols, int64_t ldc);

// Per-thread slices of a caller-provided workspace. Counting mode (base == nullptr) only adds
// up sizes, so the *_workspace_floats queries and the kernels carve identically.
class Arena {
 public:
  explicit Arena(float* base) : base_(base) {}
  float* take(int64_t floats) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += round_up(floats, kLanes);  // keeps every slice 64-byte aligned
    return p;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

}  // namespace tarn::kernels::cpu::simd
