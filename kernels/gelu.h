#pragma once
// GELU forward and backward, elementwise over n values (memory-bound, vectorised, parallel
// above kParallelGrain).
//   exact: y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)),   y' = Phi(x) + x phi(x)
//   tanh:  y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
//          y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//          computed as x sigmoid(2u), the same function with one exp and one division.
#include <cstdint>

namespace tarn::kernels::cpu {

enum class Gelu { exact, tanh };

void gelu_forward(Gelu kind, const float* x, float* y, int64_t n);

// dx = dy * gelu'(x); recomputes from x (the forward saves x, not y).
void gelu_backward(Gelu kind, const float* x, const float* dy, float* dx, int64_t n);

}  // namespace tarn::kernels::cpu
