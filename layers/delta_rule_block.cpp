#include "layers/delta_rule_block.h"

#include <cmath>

#include "framework/ops/causal_conv.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/nn.h"
#include "framework/ops/shape_ops.h"

namespace tarn {
namespace {

// Mamba-2's ranges for A and dt, spread over the heads instead of drawn.
constexpr double kMinA = 1.0, kMaxA = 16.0, kMinDt = 0.001, kMaxDt = 0.1;
constexpr double kCrossMinDt = 0.0001, kCrossMaxDt = 0.001;
constexpr float kUnitRowEps = 1e-6f;

double spread(int64_t h, int64_t heads, double lo, double hi) {
  return heads == 1 ? lo : lo + (hi - lo) * static_cast<double>(h) / static_cast<double>(heads - 1);
}

Tensor conv_identity(int64_t taps, int64_t d_model) {
  Tensor w = Tensor::zeros({taps, d_model});
  float* p = w.f32();
  for (int64_t c = 0; c < d_model; ++c) p[c] = 1.0f;  // row 0: the token itself
  return w;
}

// (B, N, H) -> (B, H, N)
Tensor heads_first(const Tensor& x) { return permute(x, {0, 2, 1}); }

}  // namespace

DeltaRuleBlock::DeltaRuleBlock(int64_t d_model, int64_t heads, int64_t conv_size, bool cross, float norm_eps,
                               ParamInit& init)
    : beta_proj(d_model, heads, init),
      alpha_proj(d_model, heads, init),
      gate_proj(d_model, d_model, init),
      heads_(heads),
      head_dim_(d_model / heads),
      norm_eps_(norm_eps) {
  TARN_ASSERT(conv_size >= 1, "delta attention: conv_size must be >= 1, got ", conv_size);
  A_log = Tensor::empty({heads});
  dt_bias = Tensor::empty({heads});
  for (int64_t h = 0; h < heads; ++h) {
    A_log.f32()[h] = static_cast<float>(std::log(spread(h, heads, kMinA, kMaxA)));
    const double dt = std::exp(spread(h, heads, std::log(cross ? kCrossMinDt : kMinDt),
                                      std::log(cross ? kCrossMaxDt : kMaxDt)));
    dt_bias.f32()[h] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
  }
  if (!cross) q_conv = conv_identity(conv_size, d_model);
  k_conv = conv_identity(conv_size, d_model);
  v_conv = conv_identity(conv_size, d_model);
  output_norm_weight = Tensor::ones({head_dim_});
  register_module("beta_proj", beta_proj);
  register_module("alpha_proj", alpha_proj);
  register_module("gate_proj", gate_proj);
  // Decay rates, convolutions and the norm keep the values set above through the model's
  // initialiser; the projections are drawn as every Linear.
  constexpr Init kKept = Init::kept_initial_value;
  register_parameter("A_log", A_log, kKept);
  register_parameter("dt_bias", dt_bias, kKept);
  if (!cross) register_parameter("q_conv", q_conv, kKept);
  register_parameter("k_conv", k_conv, kKept);
  register_parameter("v_conv", v_conv, kKept);
  register_parameter("output_norm.weight", output_norm_weight, kKept);
}

Tensor DeltaRuleBlock::conv(const Tensor& x, const Tensor& w) const { return silu(causal_depthwise_conv(x, w)); }

Tensor DeltaRuleBlock::unit_rows(const Tensor& x) { return rms_norm(x, Tensor(), 1.0f, kUnitRowEps); }

Tensor DeltaRuleBlock::beta(const Tensor& x, const Tensor& pad) const {
  Tensor b = heads_first(sigmoid(beta_proj.forward(x)));
  return pad.defined() ? mul(b, add_scalar(neg(pad), 1.0f)) : b;
}

Tensor DeltaRuleBlock::alpha(const Tensor& x, const Tensor& pad) const {
  const Tensor rate = mul(softplus(add(alpha_proj.forward(x), dt_bias)), exp(A_log));  // (B, N, H)
  Tensor a = heads_first(exp(neg(rate)));
  return pad.defined() ? add(mul(a, add_scalar(neg(pad), 1.0f)), pad) : a;
}

Tensor DeltaRuleBlock::finish(const Tensor& o, const Tensor& query) const {
  const Tensor normed = rms_norm(o, output_norm_weight, static_cast<float>(head_dim_), norm_eps_);  // (B, H, N, dh)
  const int64_t b = o.size(0), n = o.size(2);
  const Tensor merged = reshape(permute(normed, {0, 2, 1, 3}), {b, n, heads_ * head_dim_});
  return mul(merged, silu(gate_proj.forward(query)));
}

}  // namespace tarn
