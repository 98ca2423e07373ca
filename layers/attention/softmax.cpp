#include "layers/attention/softmax.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/ops/shape_ops.h"
#include "kernels/softmax_attention.h"
#include "layers/attention/common.h"
#include "layers/attention/registry.h"

namespace tarn {
namespace {

// Added to the scores of masked keys before the softmax (the path with attention dropout):
// exp() of it is exactly 0 in f32, and unlike -inf a fully masked row stays finite.
constexpr float kMaskedScore = -1e9f;

// Additive softmax mask broadcastable to scores (B, H, Nq, Nk): (B or 1, 1, Nq or 1, Nk);
// undefined when nothing is masked. window > 0: the sliding window's mask as well.
Tensor softmax_mask_bias(int64_t batch, int64_t nq, int64_t nk, const PaddingMask& pad, bool causal, int64_t window) {
  if (pad.empty() && !causal && window == 0) return Tensor();
  const int64_t rows_b = pad.empty() ? 1 : batch, rows_q = causal || window > 0 ? nq : 1;
  Tensor bias = Tensor::zeros({rows_b, 1, rows_q, nk});
  float* p = bias.f32();
  for (int64_t b = 0; b < rows_b; ++b)
    for (int64_t i = 0; i < rows_q; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        const kernels::cpu::KeyRange keys = kernels::cpu::visible_keys(i, nk, causal, window);
        const bool masked = j < keys.begin || j >= keys.end || (!pad.empty() && pad[b * nk + j]);
        p[(b * rows_q + i) * nk + j] = masked ? kMaskedScore : 0.0f;
      }
  return bias;
}

}  // namespace

SoftmaxAttention::SoftmaxAttention(AttentionSite& site, int64_t window)
    : site_(site), window_(window), scaling_(1.0f / std::sqrt(static_cast<float>(site.shape().head_dim))) {}

Tensor SoftmaxAttention::forward(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  return merge_heads(context(split_heads(in.q, s), split_heads(in.k, s), split_heads(in.v, s), in.padding()));
}

Tensor SoftmaxAttention::context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  if (site_.training() && site_.attention_dropout() > 0.0f) return with_dropout(q, k, v, pad);
  SoftmaxAttentionOptions opt;
  opt.causal = site_.shape().causal;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.scale = scaling_;
  opt.window = window_;
  opt.precision = site_.precision();  // bf16 kernels where the device has them (framework/ops/attention.h)
  return softmax_attention(q, k, v, opt);
}

Tensor SoftmaxAttention::with_dropout(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  const Precision precision = site_.precision();
  Tensor scores = matmul(scale(q, scaling_), k, false, true, precision);  // (B, H, Nq, Nk)
  const Tensor bias = softmax_mask_bias(q.size(0), q.size(2), k.size(2), pad, site_.shape().causal, window_);
  if (bias.defined()) scores = add(scores, bias.to(scores.device()));
  return matmul(site_.dropout().apply(softmax(scores), site_.attention_dropout(), true), v, false, false, precision);
}

std::unique_ptr<DecodeState> SoftmaxAttention::start_self(int64_t batch) const {
  const AttentionShape& s = site_.shape();
  auto state = std::make_unique<KeyValueState>();
  state->key = Tensor::zeros({batch, s.heads, 0, s.head_dim}, site_.device());
  state->value = Tensor::zeros({batch, s.heads, 0, s.head_dim}, site_.device());
  return state;
}

Tensor SoftmaxAttention::step_self(const AttentionInputs& in, DecodeState& state) const {
  const AttentionShape& s = site_.shape();
  return merge_heads(step_self_heads(split_heads(in.q, s), split_heads(in.k, s), split_heads(in.v, s),
                                     static_cast<KeyValueState&>(state)));
}

Tensor SoftmaxAttention::step_self_heads(const Tensor& q, const Tensor& k, const Tensor& v, KeyValueState& s) const {
  s.key = concat({s.key, k}, 2);
  s.value = concat({s.value, v}, 2);
  // A window keeps the last `window` keys and values: its state is O(window), not O(position).
  if (window_ > 0 && s.key.size(2) > window_) {
    const int64_t n = s.key.size(2);
    s.key = slice(s.key, 2, n - window_, n);
    s.value = slice(s.value, 2, n - window_, n);
  }
  // The newest query sees every cached key: the causal mask and the window hide none.
  return step(q, s.key, s.value, Tensor());
}

std::unique_ptr<DecodeState> SoftmaxAttention::precompute_cross(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  auto state = std::make_unique<KeyValueState>();
  state->key = split_heads(in.k, s);
  state->value = split_heads(in.v, s);
  state->key_padding = padding_tensor(in.padding(), in.k.size(0), in.k.size(1), state->key.device());
  return state;
}

Tensor SoftmaxAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const {
  return merge_heads(step_cross_heads(split_heads(in.q, site_.shape()), static_cast<const KeyValueState&>(state), position));
}

Tensor SoftmaxAttention::step_cross_heads(const Tensor& q, const KeyValueState& s, int64_t position) const {
  if (window_ == 0) return step(q, s.key, s.value, s.key_padding);
  // The source keys the bidirectional window shows this target position in training (the
  // kernels' own rule): O(window) per token whatever the source length.
  const kernels::cpu::KeyRange keys = kernels::cpu::visible_keys(position, s.key.size(2), false, window_);
  if (keys.begin >= keys.end) return Tensor::zeros({q.size(0), q.size(1), 1, q.size(3)}, q.device());  // as in training
  const Tensor padding = s.key_padding.defined() ? slice(s.key_padding, 1, keys.begin, keys.end) : Tensor();
  return step(q, slice(s.key, 2, keys.begin, keys.end), slice(s.value, 2, keys.begin, keys.end), padding);
}

Tensor SoftmaxAttention::step(const Tensor& q, const Tensor& key, const Tensor& value, const Tensor& key_padding) const {
  SoftmaxAttentionOptions opt;
  opt.key_padding_mask = key_padding;
  opt.scale = scaling_;
  return softmax_attention(q, key, value, opt);
}

// The registry's entry of softmax attention (builtin_kinds.inc).
AttentionKindEntry softmax_entry() {
  AttentionKindEntry e;
  e.name = "softmax";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> { return std::make_unique<SoftmaxAttention>(s); };
  e.decode_state_bytes = SoftmaxAttention::decode_state_bytes;
  e.training_bytes = SoftmaxAttention::training_bytes;
  e.settings = softmax_settings();
  return e;
}

}  // namespace tarn
