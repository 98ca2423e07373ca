#include "layers/attention/delta.h"

#include <algorithm>
#include <cmath>

#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/shape_ops.h"
#include "layers/attention/common.h"
#include "layers/attention/registry.h"

namespace tarn {
namespace {
// The epsilon of the per-head RMSNorm (LayerNorm's, 1e-5).
constexpr float kDeltaNormEps = 1e-5f;
}  // namespace

double DeltaAttention::parameters(const AttentionConfig& a, const AttentionSizes& s) {
  const double d = s.d_model, h = std::max(1.0, s.heads), convs = s.cross ? 2.0 : 3.0;
  return 2 * (d * h + h) + (d * d + d) + 2 * h + convs * static_cast<double>(a.conv_size) * d + s.head_dim();
}

double DeltaAttention::decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double) {
  const double head = std::floor(s.head_dim()), f = 4.0;
  double state = f * std::max(1.0, s.heads) * head * head;
  if (!s.cross)
    state += f * s.d_model * (3 * (static_cast<double>(a.conv_size) - 1) + 2 * static_cast<double>(a.conv_size));
  return state;
}

DeltaAttention::DeltaAttention(AttentionSite& site, bool erases)
    : site_(site),
      erases_(erases),
      block_(std::make_unique<DeltaRuleBlock>(site.shape().d_model, site.shape().heads, site.config().conv_size,
                                              site.shape().cross, kDeltaNormEps, site.init())) {
  site.add_module("delta", *block_);
}

DeltaRuleOptions DeltaAttention::options(bool reverse) const {
  DeltaRuleOptions o{reverse, site_.config().chunk, erases_};
  o.precision = site_.precision();
  return o;
}

DeltaAttention::Write DeltaAttention::write(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  const Tensor pad_rows = padding_rows(in.padding(), in.source.size(0), in.source.size(1), in.source.device());
  return {DeltaRuleBlock::unit_rows(split_heads(block_->conv(in.k, block_->k_conv), s)),
          split_heads(block_->conv(in.v, block_->v_conv), s), block_->beta(in.source, pad_rows),
          block_->alpha(in.source, pad_rows)};
}

Tensor DeltaAttention::forward(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  if (s.cross) {
    const Write w = write(in);
    const Tensor q = DeltaRuleBlock::unit_rows(split_heads(in.q, s));
    return block_->finish(matmul(q, delta_rule_state(w.k, w.v, w.beta, w.alpha, options(false))), in.x);
  }
  const Tensor pad_rows = padding_rows(in.padding(), in.x.size(0), in.x.size(1), in.x.device());
  const Tensor q = DeltaRuleBlock::unit_rows(split_heads(block_->conv(in.q, block_->q_conv), s));
  const Tensor k = DeltaRuleBlock::unit_rows(split_heads(block_->conv(in.k, block_->k_conv), s));
  const Tensor v = split_heads(block_->conv(in.v, block_->v_conv), s);
  const Tensor beta = block_->beta(in.x, pad_rows), alpha = block_->alpha(in.x, pad_rows);
  Tensor o = delta_rule(q, k, v, beta, alpha, options(false));
  if (!s.causal) o = add(o, delta_rule(q, k, v, beta, alpha, options(true)));
  return block_->finish(o, in.x);
}

std::unique_ptr<DecodeState> DeltaAttention::start_self(int64_t batch) const {
  const AttentionShape& s = site_.shape();
  const Device dev = site_.device();
  const int64_t taps = block_->conv_size();
  auto state = std::make_unique<DeltaState>();
  state->state = Tensor::zeros({batch, s.heads, s.head_dim, s.head_dim}, dev);
  for (Tensor* tail : {&state->q_tail, &state->k_tail, &state->v_tail})
    *tail = Tensor::zeros({batch, taps - 1, s.d_model}, dev);
  return state;
}

Tensor DeltaAttention::step_self(const AttentionInputs& in, DecodeState& state) const {
  auto& st = static_cast<DeltaState&>(state);
  const AttentionShape& s = site_.shape();
  const int64_t batch = in.x.size(0), taps = block_->conv_size();
  // The convolution of the newest position: its window is the tail and the token itself.
  auto convolved = [&](const Tensor& projected, const Tensor& w, Tensor& tail) {
    const Tensor window = concat({tail, projected}, 1);  // (B, taps, D)
    tail = slice(window, 1, 1, taps);
    return slice(block_->conv(window, w), 1, taps - 1, taps).view({batch, s.heads, s.head_dim});
  };
  const Tensor q = DeltaRuleBlock::unit_rows(convolved(in.q, block_->q_conv, st.q_tail));
  const Tensor k = DeltaRuleBlock::unit_rows(convolved(in.k, block_->k_conv, st.k_tail));
  const Tensor v = convolved(in.v, block_->v_conv, st.v_tail);
  const Tensor beta = block_->beta(in.x, Tensor()).view({batch, s.heads});
  const Tensor alpha = block_->alpha(in.x, Tensor()).view({batch, s.heads});
  const Tensor o = delta_rule_step(st.state, q, k, v, beta, alpha, erases_).view({batch, s.heads, 1, s.head_dim});
  return block_->finish(o, in.x);
}

std::unique_ptr<DecodeState> DeltaAttention::precompute_cross(const AttentionInputs& in) const {
  const Write w = write(in);
  auto state = std::make_unique<DeltaState>();
  state->state = delta_rule_state(w.k, w.v, w.beta, w.alpha, options(false));
  return state;
}

Tensor DeltaAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t) const {
  // o = S^T q for every query row at once.
  const Tensor q = DeltaRuleBlock::unit_rows(split_heads(in.q, site_.shape()));
  return block_->finish(matmul(q, static_cast<const DeltaState&>(state).state), in.x);
}

// The registry's entries of the delta rule and of gated attention, its layer without the erase
// (builtin_kinds.inc).
AttentionKindEntry delta_entry() {
  AttentionKindEntry e;
  e.name = "delta";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> { return std::make_unique<DeltaAttention>(s, true); };
  e.parameters = DeltaAttention::parameters;
  e.decode_state_bytes = DeltaAttention::decode_state_bytes;
  e.export_settings = DeltaAttention::export_settings;
  e.settings = delta_settings();
  return e;
}

AttentionKindEntry gated_entry() {
  AttentionKindEntry e = delta_entry();
  e.name = "gated";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> { return std::make_unique<DeltaAttention>(s, false); };
  e.settings = gated_settings();
  return e;
}

}  // namespace tarn
