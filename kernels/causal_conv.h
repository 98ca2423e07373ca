#pragma once
// The short causal depthwise convolution of delta and gated attention (layers/delta_rule_block.h)
// on raw row-major buffers: x (batch, n, channels), w (taps, channels), row i weighing the
// token i positions back,
//
//   y[b, t, c] = sum_{i < taps, i <= t} w[i, c] x[b, t - i, c]
//
// Backward: dx[b, t, c] = sum_{i < taps, t + i < n} w[i, c] dy[b, t + i, c] and
// dw[i, c] = sum_{b, t >= i} x[b, t - i, c] dy[b, t, c], each summed in a fixed order whatever
// the thread count. Parallel over (batch, position) rows forward and for dx, over channel blocks
// for dw (OpenMP).
#include <cstdint>

namespace tarn::kernels::cpu {

struct CausalConvDims {
  int64_t batch = 1, n = 0, channels = 0, taps = 1;
};

void causal_conv_forward(const CausalConvDims& d, const float* x, const float* w, float* y);
// dx or dw may be null (not wanted).
void causal_conv_backward(const CausalConvDims& d, const float* x, const float* w, const float* dy, float* dx,
                          float* dw);

}  // namespace tarn::kernels::cpu
