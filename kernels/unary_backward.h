#pragma once
// The derivatives of the unary ops (kernels/elementwise.h), shared by the CPU loops and the
// CUDA kernels so that both backends compute gradients with the same expression.
#include <math.h>  // expf on the host and the device

#include "kernels/elementwise.h"
#include "kernels/host_device.h"

namespace tarn::kernels::cpu {

// Which of x and y = f(x) the derivative reads (the other may be passed as 0).
template <Unary Op>
constexpr bool kUnaryBackwardReadsX = Op == Unary::log || Op == Unary::silu || Op == Unary::softplus;
template <Unary Op>
constexpr bool kUnaryBackwardReadsY =
    Op == Unary::exp || Op == Unary::sqrt || Op == Unary::relu || Op == Unary::tanh || Op == Unary::sigmoid;

// expf, the exp of silu's and softplus' derivatives unless a backend passes its own (the CPU
// loops pass their vectorised one: libm's scalar expf keeps the loop from vectorising).
struct LibmExp {
  TARN_HOST_DEVICE float operator()(float x) const { return expf(x); }
};

// dy * f'(x), written with whichever of x and y = f(x) is cheaper; s is the constant of scale
// and add_scalar.
template <Unary Op, typename Exp = LibmExp>
TARN_HOST_DEVICE float unary_backward_of(float x, float y, float dy, float s, Exp exp = {}) {
  if constexpr (Op == Unary::neg) return -dy;
  if constexpr (Op == Unary::exp) return dy * y;
  if constexpr (Op == Unary::log) return dy / x;
  if constexpr (Op == Unary::sqrt) return dy * 0.5f / y;
  if constexpr (Op == Unary::relu) return y > 0.0f ? dy : 0.0f;
  if constexpr (Op == Unary::tanh) return dy * (1.0f - y * y);
  if constexpr (Op == Unary::scale) return dy * s;
  if constexpr (Op == Unary::add_scalar) return dy;
  if constexpr (Op == Unary::sigmoid) return dy * y * (1.0f - y);
  // silu(x) = x sigmoid(x): d/dx = sigmoid(x) (1 + x (1 - sigmoid(x))); softplus' = sigmoid.
  if constexpr (Op == Unary::silu) {
    const float sig = 1.0f / (1.0f + exp(-x));
    return dy * sig * (1.0f + x * (1.0f - sig));
  }
  if constexpr (Op == Unary::softplus) return dy / (1.0f + exp(-x));
}

}  // namespace tarn::kernels::cpu
