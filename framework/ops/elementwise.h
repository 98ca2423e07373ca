#pragma once
// Elementwise arithmetic with broadcasting, with autograd. Broadcasting follows NumPy: shapes
// are aligned at the last axis and an extent of 1 (or a missing leading axis) stretches. The
// common "bias" case (b's shape a suffix of a's) has a fast path. Backward sums the gradient
// over the stretched axes.
#include "framework/tensor.h"

namespace tarn {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);             // x * s
Tensor add_scalar(const Tensor& x, float s);        // x + s
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);                    // 1 / (1 + e^-x)
Tensor silu(const Tensor& x);                       // x sigmoid(x)
Tensor softplus(const Tensor& x);                   // log(1 + e^x), without overflow

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(const Tensor& a, float s) { return scale(a, s); }

// The shape a and b broadcast to; throws naming `op` and both shapes when they do not.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);

}  // namespace tarn
