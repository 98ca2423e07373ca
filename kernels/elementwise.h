#pragma once
// Elementwise arithmetic on contiguous f32 buffers: binary ops with NumPy broadcasting and the
// unary maths ops, forward and backward. Memory-bound: one pass, vectorised inner loops,
// parallel above kParallelGrain elements.
#include <cstdint>

namespace tarn::kernels::cpu {

enum class Binary { add, sub, mul, div };

// out[i] = a[i] op b[i], i < n (same shapes).
void binary(Binary op, const float* a, const float* b, float* out, int64_t n);

// The bias case: a (rows, cols), b (cols) repeated over rows. out (rows, cols).
void binary_row(Binary op, const float* a, const float* b, float* out, int64_t rows, int64_t cols);

// General broadcasting. out has `ndim` extents `shape`; a_strides/b_strides are the operands'
// element strides per output axis (0 along stretched axes). Adjacent axes are merged first, so
// (B,N,D) + (D) costs the same as the bias case.
constexpr int kMaxBroadcastDims = 8;
void binary_broadcast(Binary op, const float* a, const int64_t* a_strides, const float* b, const int64_t* b_strides,
                      float* out, const int64_t* shape, int ndim);

enum class Unary { neg, exp, log, sqrt, relu, tanh, scale, add_scalar, sigmoid, silu, softplus };

// y = f(x); `s` is the constant of scale and add_scalar (ignored otherwise).
void unary(Unary op, const float* x, float* y, int64_t n, float s = 0.0f);

// dx = dy * f'(x), given x and y = f(x) (each op reads the one it needs: exp, sqrt, tanh, relu
// read y; log reads x; neg, scale and add_scalar read neither, so x and y may be null).
void unary_backward(Unary op, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                    float s = 0.0f);

}  // namespace tarn::kernels::cpu
