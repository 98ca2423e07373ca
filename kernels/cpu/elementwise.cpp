#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/elementwise_parallel.h"
#include "kernels/parallel.h"
#include "kernels/unary_backward.h"

namespace tarn::kernels::cpu {
namespace {

// Broadcast loops are cut into tiles of at most this many elements of one output row, so that a
// few long rows still spread over every thread and many short rows cost one tile each.
constexpr int64_t kTile = 4096;

template <Binary Op>
inline float apply(float a, float b) {
  if constexpr (Op == Binary::add) return a + b;
  if constexpr (Op == Binary::sub) return a - b;
  if constexpr (Op == Binary::mul) return a * b;
  if constexpr (Op == Binary::div) return a / b;
}

// One contiguous run of an output row. sa / sb are the operands' strides along it: 1, or 0 for
// a stretched operand (merged axes never leave both at 0).
template <Binary Op>
inline void run(const float* a, int64_t sa, const float* b, int64_t sb, float* out, int64_t len) {
  if (sa && sb) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i] = apply<Op>(a[i], b[i]);
  } else if (sa) {
    const float bv = *b;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i] = apply<Op>(a[i], bv);
  } else {
    const float av = *a;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i] = apply<Op>(av, b[i]);
  }
}

template <Binary Op>
void same_shape(const float* a, const float* b, float* out, int64_t n) {
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = apply<Op>(a[i], b[i]);
  });
}

// out (rows, cols) = a (rows, cols) op b (cols), tiled as described at kTile.
template <Binary Op>
void row_broadcast(const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
  const int64_t tiles_per_row = (cols + kTile - 1) / kTile;
  const int64_t tiles = rows * tiles_per_row;
#pragma omp parallel for if (rows * cols > kParallelGrain) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r = t / tiles_per_row, c0 = (t % tiles_per_row) * kTile;
    const int64_t len = std::min(kTile, cols - c0);
    const int64_t base = r * cols + c0;
    run<Op>(a + base, 1, b + c0, 1, out + base, len);
  }
}

// General case on merged axes: shape[0 .. ndim-1], the last one contiguous in the output.
template <Binary Op>
void strided(const float* a, const int64_t* sa, const float* b, const int64_t* sb, float* out, const int64_t* shape,
             int ndim) {
  const int64_t inner = shape[ndim - 1];
  int64_t rows = 1;
  for (int d = 0; d < ndim - 1; ++d) rows *= shape[d];
  const int64_t tiles_per_row = (inner + kTile - 1) / kTile;
  const int64_t tiles = rows * tiles_per_row;
#pragma omp parallel for if (rows * inner > kParallelGrain) schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    int64_t r = t / tiles_per_row;
    const int64_t c0 = (t % tiles_per_row) * kTile;
    int64_t ao = c0 * sa[ndim - 1], bo = c0 * sb[ndim - 1];
    for (int d = ndim - 2; d >= 0; --d) {  // row index -> operand offsets
      const int64_t i = r % shape[d];
      r /= shape[d];
      ao += i * sa[d];
      bo += i * sb[d];
    }
    const int64_t len = std::min(kTile, inner - c0);
    run<Op>(a + ao, sa[ndim - 1], b + bo, sb[ndim - 1], out + (t / tiles_per_row) * inner + c0, len);
  }
}

// The runtime op picks a compile-time instantiation, so that each inner loop is one operation.
template <template <Binary> class F, typename... Args>
void dispatch(Binary op, Args... args) {
  switch (op) {
    case Binary::add: return F<Binary::add>::go(args...);
    case Binary::sub: return F<Binary::sub>::go(args...);
    case Binary::mul: return F<Binary::mul>::go(args...);
    case Binary::div: return F<Binary::div>::go(args...);
  }
}
template <Binary Op>
struct SameShape {
  template <typename... A>
  static void go(A... a) { same_shape<Op>(a...); }
};
template <Binary Op>
struct RowBroadcast {
  template <typename... A>
  static void go(A... a) { row_broadcast<Op>(a...); }
};
template <Binary Op>
struct Strided {
  template <typename... A>
  static void go(A... a) { strided<Op>(a...); }
};

}  // namespace

void binary(Binary op, const float* a, const float* b, float* out, int64_t n) {
  dispatch<SameShape>(op, a, b, out, n);
}

void binary_row(Binary op, const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
  dispatch<RowBroadcast>(op, a, b, out, rows, cols);
}

void binary_broadcast(Binary op, const float* a, const int64_t* a_strides, const float* b, const int64_t* b_strides,
                      float* out, const int64_t* shape, int ndim) {
  TARN_ASSERT(ndim <= kMaxBroadcastDims, "binary_broadcast: at most ", kMaxBroadcastDims, " dimensions, got ", ndim);
  // Merge axes: drop extent-1 axes, then fuse an axis into the next when both operands step
  // through them as one (stride[d] == stride[d+1] * shape[d+1]).
  int64_t s[kMaxBroadcastDims], as[kMaxBroadcastDims], bs[kMaxBroadcastDims];
  int m = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (m > 0 && as[m - 1] == a_strides[d] * shape[d] && bs[m - 1] == b_strides[d] * shape[d]) {
      s[m - 1] *= shape[d];
      as[m - 1] = a_strides[d];
      bs[m - 1] = b_strides[d];
      continue;
    }
    s[m] = shape[d];
    as[m] = a_strides[d];
    bs[m] = b_strides[d];
    ++m;
  }
  if (m == 0) {  // every extent 1: one element
    s[0] = 1;
    as[0] = bs[0] = 1;
    m = 1;
  }
  if (m == 1 && as[0] == 1 && bs[0] == 1) return binary(op, a, b, out, s[0]);
  if (m == 2 && as[0] == s[1] && as[1] == 1 && bs[0] == 0 && bs[1] == 1)
    return binary_row(op, a, b, out, s[0], s[1]);
  dispatch<Strided>(op, a, static_cast<const int64_t*>(as), b, static_cast<const int64_t*>(bs), out,
                    static_cast<const int64_t*>(s), m);
}

namespace {

template <Unary Op>
inline float forward_of(float x, float s) {
  if constexpr (Op == Unary::neg) return -x;
  if constexpr (Op == Unary::exp) return math::exp(x);
  if constexpr (Op == Unary::log) return std::log(x);  // scalar (libm): off every hot path
  if constexpr (Op == Unary::sqrt) return std::sqrt(x);
  if constexpr (Op == Unary::relu) return std::max(x, 0.0f);  // keeps NaN (max(a, b) = a < b ? b : a)
  if constexpr (Op == Unary::tanh) return math::tanh(x);
  if constexpr (Op == Unary::scale) return x * s;
  if constexpr (Op == Unary::add_scalar) return x + s;
  // exp(-x) overflows to inf for x < -88: 1 / inf = 0, the limit.
  if constexpr (Op == Unary::sigmoid) return 1.0f / (1.0f + math::exp(-x));
  if constexpr (Op == Unary::silu) return x / (1.0f + math::exp(-x));
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow; scalar log1p, off every hot path.
  if constexpr (Op == Unary::softplus) return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)));
}

template <Unary Op>
void unary_loop(const float* x, float* y, int64_t n, float s) {
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = forward_of<Op>(x[i], s);
  });
}

// kernels/unary_backward.h's derivatives with the vectorised math::exp for silu's and softplus'
// (delta attention runs silu on q, k, v and its output gate: scalar expf calls were a visible
// share of a step).
struct VectorExp {
  float operator()(float x) const { return math::exp(x); }
};

template <Unary Op>
void unary_backward_loop(const float* x, const float* y, const float* dy, float* dx, int64_t n, float s) {
  constexpr bool kReadsX = kUnaryBackwardReadsX<Op>, kReadsY = kUnaryBackwardReadsY<Op>;
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i)
      dx[i] = unary_backward_of<Op>(kReadsX ? x[i] : 0.0f, kReadsY ? y[i] : 0.0f, dy[i], s, VectorExp{});
  });
}

}  // namespace

void unary(Unary op, const float* x, float* y, int64_t n, float s) {
  switch (op) {
    case Unary::neg: return unary_loop<Unary::neg>(x, y, n, s);
    case Unary::exp: return unary_loop<Unary::exp>(x, y, n, s);
    case Unary::log: return unary_loop<Unary::log>(x, y, n, s);
    case Unary::sqrt: return unary_loop<Unary::sqrt>(x, y, n, s);
    case Unary::relu: return unary_loop<Unary::relu>(x, y, n, s);
    case Unary::tanh: return unary_loop<Unary::tanh>(x, y, n, s);
    case Unary::scale: return unary_loop<Unary::scale>(x, y, n, s);
    case Unary::add_scalar: return unary_loop<Unary::add_scalar>(x, y, n, s);
    case Unary::sigmoid: return unary_loop<Unary::sigmoid>(x, y, n, s);
    case Unary::silu: return unary_loop<Unary::silu>(x, y, n, s);
    case Unary::softplus: return unary_loop<Unary::softplus>(x, y, n, s);
  }
}

void unary_backward(Unary op, const float* x, const float* y, const float* dy, float* dx, int64_t n, float s) {
  switch (op) {
    case Unary::neg: return unary_backward_loop<Unary::neg>(x, y, dy, dx, n, s);
    case Unary::exp: return unary_backward_loop<Unary::exp>(x, y, dy, dx, n, s);
    case Unary::log: return unary_backward_loop<Unary::log>(x, y, dy, dx, n, s);
    case Unary::sqrt: return unary_backward_loop<Unary::sqrt>(x, y, dy, dx, n, s);
    case Unary::relu: return unary_backward_loop<Unary::relu>(x, y, dy, dx, n, s);
    case Unary::tanh: return unary_backward_loop<Unary::tanh>(x, y, dy, dx, n, s);
    case Unary::scale: return unary_backward_loop<Unary::scale>(x, y, dy, dx, n, s);
    case Unary::add_scalar: return unary_backward_loop<Unary::add_scalar>(x, y, dy, dx, n, s);
    case Unary::sigmoid: return unary_backward_loop<Unary::sigmoid>(x, y, dy, dx, n, s);
    case Unary::silu: return unary_backward_loop<Unary::silu>(x, y, dy, dx, n, s);
    case Unary::softplus: return unary_backward_loop<Unary::softplus>(x, y, dy, dx, n, s);
  }
}

}  // namespace tarn::kernels::cpu
