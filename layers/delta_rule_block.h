#pragma once
// What the gated delta rule adds around q, k and v in a MultiHeadAttention of kind delta
// (Gated DeltaNet, Yang, Kautz & Hatamizadeh, ICLR 2025; docs/design.md section 2):
//
//   q, k, v  = silu(causal depthwise conv(x W)), conv_size taps (identity at init); cross-
//              attention's queries skip the convolution (they read a finished state, and a
//              decoding step then needs no query history)
//   q, k     = q / |q|, k / |k| per head (+1e-6 inside the root)
//   beta_t   = sigmoid(beta_proj(x_t))                                  per head, in (0, 1)
//   alpha_t  = exp(-exp(A_log) softplus(alpha_proj(x_t) + dt_bias))     per head, in (0, 1]
//   out      = out_proj( RMSNorm_head(o) * output_norm.weight * silu(gate_proj(query)) )
//
// x is the writer's input (the key/value side). A_log = log A with A spread evenly over
// [1, 16] across heads and dt_bias = softplus^-1(dt) with dt log-spaced over [0.001, 0.1]
// (Mamba-2's ranges, here deterministic rather than drawn): alpha from 0.999 to 0.2, some
// heads local, some global. Cross-attention writes a whole source that every target position
// may need, so its dt spans [0.0001, 0.001] (alpha >= 0.984): every head starts global.
// output_norm.weight = 1. A_log, dt_bias and output_norm get no weight decay
// (framework/optim/adamw.h). They are registered with Module::Init::kept_initial_value, so the
// model's initialiser (framework/init.h) leaves them as constructed and draws the *_proj weights
// like every Linear's.
#include <cstdint>

#include "framework/module.h"
#include "layers/linear.h"
#include "layers/param_init.h"

namespace tarn {

class DeltaRuleBlock : public Module {
 public:
  // cross: the block of a cross-attention, which has no q_conv and starts with a long memory.
  DeltaRuleBlock(int64_t d_model, int64_t heads, int64_t conv_size, bool cross, float norm_eps, ParamInit& init);

  // The causal depthwise convolution with its SiLU: x (B, N, D) -> (B, N, D). `which` is
  // q_conv, k_conv or v_conv.
  Tensor conv(const Tensor& x, const Tensor& which) const;
  // (B, H, N, dh) rows scaled to unit length.
  static Tensor unit_rows(const Tensor& x);
  // beta and alpha of the writer's input x (B, N, D) -> (B, H, N) each; a padded position
  // (pad (B, 1, N) f32 with 1 = padded, or undefined) gets beta 0 and alpha 1: a no-op.
  Tensor beta(const Tensor& x, const Tensor& pad) const;
  Tensor alpha(const Tensor& x, const Tensor& pad) const;
  // o (B, H, N, dh) normalised per head, gated by query (B, N, D) -> (B, N, D), before out_proj.
  Tensor finish(const Tensor& o, const Tensor& query) const;

  int64_t conv_size() const { return k_conv.size(0); }

  Linear beta_proj, alpha_proj, gate_proj;
  Tensor A_log, dt_bias;          // (H)
  Tensor q_conv, k_conv, v_conv;  // (conv_size, D): row i weighs the token i positions back; q_conv
                                  // undefined in cross-attention
  Tensor output_norm_weight;      // (dh), registered as output_norm.weight

 private:
  int64_t heads_, head_dim_;
  float norm_eps_;
};

}  // namespace tarn
