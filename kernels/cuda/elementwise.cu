// Elementwise arithmetic on the GPU (kernels/elementwise.h): binary ops with broadcasting and
// the unary maths ops, forward and backward. Memory-bound: grid-stride loops, one read per
// operand and one write per element; the bias case reads its row vector once per thread.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"
#include "kernels/unary_backward.h"

namespace tarn::kernels::TARN_CUDA_NS {
namespace {

using namespace device;  // the launch helpers and block reductions of kernels/cuda/common.cuh

template <Binary Op>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (Op == Binary::add) return a + b;
  if constexpr (Op == Binary::sub) return a - b;
  if constexpr (Op == Binary::mul) return a * b;
  if constexpr (Op == Binary::div) return a / b;
}

// a, b, out: (n). out may alias a or b.
template <Binary Op>
__global__ void binary_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = apply<Op>(a[i], b[i]);
}

// a, out: (rows, cols); b: (cols). x over columns, y strides over rows: each thread reads its
// b[c] once.
template <Binary Op>
__global__ void binary_row_kernel(const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float bv = b[c];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) out[r * cols + c] = apply<Op>(a[r * cols + c], bv);
}

// The general case on merged axes (at most kMaxBroadcastDims), by value in the parameters.
struct Strides {
  int ndim;
  int64_t shape[kMaxBroadcastDims];
  int64_t a[kMaxBroadcastDims];
  int64_t b[kMaxBroadcastDims];
};

template <Binary Op>
__global__ void binary_strided_kernel(const float* a, const float* b, float* out, Strides s, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t rest = i, ao = 0, bo = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      const int64_t k = rest % s.shape[d];
      rest /= s.shape[d];
      ao += k * s.a[d];
      bo += k * s.b[d];
    }
    out[i] = apply<Op>(a[ao], b[bo]);
  }
}

template <Unary Op>
__device__ __forceinline__ float forward_of(float x, float s) {
  if constexpr (Op == Unary::neg) return -x;
  if constexpr (Op == Unary::exp) return expf(x);
  if constexpr (Op == Unary::log) return logf(x);
  if constexpr (Op == Unary::sqrt) return sqrtf(x);
  if constexpr (Op == Unary::relu) return x < 0.0f ? 0.0f : x;  // keeps NaN, as the CPU's max(x, 0)
  if constexpr (Op == Unary::tanh) return tanhf(x);
  if constexpr (Op == Unary::scale) return x * s;
  if constexpr (Op == Unary::add_scalar) return x + s;
  if constexpr (Op == Unary::sigmoid) return 1.0f / (1.0f + expf(-x));
  if constexpr (Op == Unary::silu) return x / (1.0f + expf(-x));
  if constexpr (Op == Unary::softplus) return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

template <Unary Op>
__global__ void unary_kernel(const float* x, float* y, int64_t n, float s) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = forward_of<Op>(x[i], s);
}

template <Unary Op>
__global__ void unary_backward_kernel(const float* x, const float* y, const float* dy, float* dx, int64_t n, float s) {
  constexpr bool kReadsX = cpu::kUnaryBackwardReadsX<Op>, kReadsY = cpu::kUnaryBackwardReadsY<Op>;
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = cpu::unary_backward_of<Op>(kReadsX ? x[i] : 0.0f, kReadsY ? y[i] : 0.0f, dy[i], s);
}

template <Binary Op>
void launch_binary(const float* a, const float* b, float* out, int64_t n) {
  tarn::launch(binary_kernel<Op>, grid_for(n), kBlock, 0, nullptr, a, b, out, n);
}

template <Binary Op>
void launch_binary_row(const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock),
                  static_cast<unsigned>(std::min<int64_t>(rows, device::kMaxGridY)));
  tarn::launch(binary_row_kernel<Op>, grid, kBlock, 0, nullptr, a, b, out, rows, cols);
}

template <Binary Op>
void launch_binary_strided(const float* a, const float* b, float* out, const Strides& s, int64_t n) {
  tarn::launch(binary_strided_kernel<Op>, grid_for(n), kBlock, 0, nullptr, a, b, out, s, n);
}

#define TARN_BINARY_DISPATCH(op, fn, ...)                          \
  switch (op) {                                                    \
    case Binary::add: return fn<Binary::add>(__VA_ARGS__);         \
    case Binary::sub: return fn<Binary::sub>(__VA_ARGS__);         \
    case Binary::mul: return fn<Binary::mul>(__VA_ARGS__);         \
    case Binary::div: return fn<Binary::div>(__VA_ARGS__);         \
  }

#define TARN_UNARY_DISPATCH(op, kernel, n, ...)                                                   \
  switch (op) {                                                                                   \
    case Unary::neg: return tarn::launch(kernel<Unary::neg>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::exp: return tarn::launch(kernel<Unary::exp>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::log: return tarn::launch(kernel<Unary::log>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::sqrt: return tarn::launch(kernel<Unary::sqrt>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::relu: return tarn::launch(kernel<Unary::relu>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::tanh: return tarn::launch(kernel<Unary::tanh>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::scale: return tarn::launch(kernel<Unary::scale>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::add_scalar:                                                                       \
      return tarn::launch(kernel<Unary::add_scalar>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::sigmoid:                                                                          \
      return tarn::launch(kernel<Unary::sigmoid>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::silu: return tarn::launch(kernel<Unary::silu>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
    case Unary::softplus:                                                                         \
      return tarn::launch(kernel<Unary::softplus>, grid_for(n), kBlock, 0, nullptr, __VA_ARGS__); \
  }

}  // namespace

void binary(Binary op, const float* a, const float* b, float* out, int64_t n) {
  if (n <= 0) return;
  TARN_BINARY_DISPATCH(op, launch_binary, a, b, out, n);
}

void binary_row(Binary op, const float* a, const float* b, float* out, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  TARN_BINARY_DISPATCH(op, launch_binary_row, a, b, out, rows, cols);
}

void binary_broadcast(Binary op, const float* a, const int64_t* a_strides, const float* b, const int64_t* b_strides,
                      float* out, const int64_t* shape, int ndim) {
  TARN_ASSERT(ndim >= 0 && ndim <= kMaxBroadcastDims, "binary_broadcast: at most ", kMaxBroadcastDims,
              " dimensions, got ", ndim);
  // Merge axes as the CPU kernel does: drop extent-1 axes, fuse an axis into the previous one
  // when both operands step through the pair as one.
  Strides s{};
  int m = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (m > 0 && s.a[m - 1] == a_strides[d] * shape[d] && s.b[m - 1] == b_strides[d] * shape[d]) {
      s.shape[m - 1] *= shape[d];
      s.a[m - 1] = a_strides[d];
      s.b[m - 1] = b_strides[d];
      continue;
    }
    s.shape[m] = shape[d];
    s.a[m] = a_strides[d];
    s.b[m] = b_strides[d];
    ++m;
  }
  if (m == 0) {
    s.shape[0] = 1;
    s.a[0] = s.b[0] = 1;
    m = 1;
  }
  s.ndim = m;
  if (m == 1 && s.a[0] == 1 && s.b[0] == 1) return ::tarn::kernels::TARN_CUDA_NS::binary(op, a, b, out, s.shape[0]);
  if (m == 2 && s.a[0] == s.shape[1] && s.a[1] == 1 && s.b[0] == 0 && s.b[1] == 1)
    return ::tarn::kernels::TARN_CUDA_NS::binary_row(op, a, b, out, s.shape[0], s.shape[1]);
  int64_t n = 1;
  for (int d = 0; d < m; ++d) n *= s.shape[d];
  TARN_BINARY_DISPATCH(op, launch_binary_strided, a, b, out, s, n);
}

void unary(Unary op, const float* x, float* y, int64_t n, float s) {
  if (n <= 0) return;
  TARN_UNARY_DISPATCH(op, unary_kernel, n, x, y, n, s);
}

void unary_backward(Unary op, const float* x, const float* y, const float* dy, float* dx, int64_t n, float s) {
  if (n <= 0) return;
  TARN_UNARY_DISPATCH(op, unary_backward_kernel, n, x, y, dy, dx, n, s);
}

}  // namespace tarn::kernels::TARN_CUDA_NS
