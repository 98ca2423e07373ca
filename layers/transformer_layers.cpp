#include "layers/transformer_layers.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/nn.h"

namespace tarn {

PostNormLayer::PostNormLayer(const BartConfig& c, DropoutStreams& dropout)
    : dropout_p_(static_cast<float>(c.dropout)),
      activation_dropout_p_(static_cast<float>(c.activation_dropout)),
      dropout_(&dropout) {}

void PostNormLayer::register_attention(const std::string& name, MultiHeadAttention& attn, LayerNorm& norm) {
  register_module(name, attn);
  register_module(name + "_layer_norm", norm);
}

void PostNormLayer::register_feed_forward(Linear& fc1, Linear& fc2, LayerNorm& final_layer_norm) {
  register_module("fc1", fc1);
  register_module("fc2", fc2);
  register_module("final_layer_norm", final_layer_norm);
}

Tensor PostNormLayer::feed_forward(const Tensor& h, const Linear& fc1, const Linear& fc2,
                                   const LayerNorm& norm) const {
  Tensor f = dropout_->apply(gelu(fc1.forward(h)), activation_dropout_p_, training());
  f = dropped(fc2.forward(f));
  return norm.forward(add(h, f));
}

Tensor PostNormLayer::dropped(const Tensor& x) const { return dropout_->apply(x, dropout_p_, training()); }

EncoderLayer::EncoderLayer(const BartConfig& c, int64_t index, ParamInit& init, DropoutStreams& dropout)
    : PostNormLayer(c, dropout),
      self_attn(c.d_model, c.heads, c.encoder_self_attention_of(index), /*causal=*/false,
                static_cast<float>(c.attention_dropout), init, dropout),
      self_attn_layer_norm(c.d_model, c.layer_norm_eps),
      fc1(c.d_model, c.ffn_dim, init),
      fc2(c.ffn_dim, c.d_model, init),
      final_layer_norm(c.d_model, c.layer_norm_eps) {
  register_attention("self_attn", self_attn, self_attn_layer_norm);
  register_feed_forward(fc1, fc2, final_layer_norm);
}

Tensor EncoderLayer::forward(const Tensor& x, const PaddingMask& padding) const {
  const Tensor h = self_attn_layer_norm.forward(add(x, dropped(self_attn.forward(x, x, padding))));
  return feed_forward(h, fc1, fc2, final_layer_norm);
}

DecoderLayer::DecoderLayer(const BartConfig& c, int64_t index, ParamInit& init, DropoutStreams& dropout)
    : PostNormLayer(c, dropout),
      self_attn(c.d_model, c.heads, c.decoder_self_attention_of(index), /*causal=*/true,
                static_cast<float>(c.attention_dropout), init, dropout),
      self_attn_layer_norm(c.d_model, c.layer_norm_eps),
      encoder_attn(c.d_model, c.heads, c.cross_attention_of(index), /*causal=*/false,
                   static_cast<float>(c.attention_dropout), init, dropout, /*cross=*/true,
                   /*max_keys=*/c.max_position_embeddings),
      encoder_attn_layer_norm(c.d_model, c.layer_norm_eps),
      fc1(c.d_model, c.ffn_dim, init),
      fc2(c.ffn_dim, c.d_model, init),
      final_layer_norm(c.d_model, c.layer_norm_eps) {
  register_attention("self_attn", self_attn, self_attn_layer_norm);
  register_attention("encoder_attn", encoder_attn, encoder_attn_layer_norm);
  register_feed_forward(fc1, fc2, final_layer_norm);
}

Tensor DecoderLayer::forward(const Tensor& x, const PaddingMask& self_padding, const Tensor& encoder_out,
                             const PaddingMask& encoder_padding) const {
  Tensor h = self_attn_layer_norm.forward(add(x, dropped(self_attn.forward(x, x, self_padding))));
  h = encoder_attn_layer_norm.forward(add(h, dropped(encoder_attn.forward(h, encoder_out, encoder_padding))));
  return feed_forward(h, fc1, fc2, final_layer_norm);
}

DecoderLayerCache DecoderLayer::start_decoding(const Tensor& encoder_out, const PaddingMask& encoder_padding) const {
  DecoderLayerCache cache;
  cache.self_attn = self_attn.start_self(encoder_out.size(0));
  cache.encoder_attn = encoder_attn.precompute_cross(encoder_out, encoder_padding);
  return cache;
}

Tensor DecoderLayer::step(const Tensor& x, DecoderLayerCache& cache) const {
  NoGradGuard no_grad;
  Tensor h = self_attn_layer_norm.forward(add(x, self_attn.step_self(x, cache.self_attn)));
  // step_self has counted this position: it is length - 1.
  h = encoder_attn_layer_norm.forward(add(h, encoder_attn.step_cross(h, cache.encoder_attn, cache.self_attn.length() - 1)));
  Tensor f = fc2.forward(gelu(fc1.forward(h)));
  return final_layer_norm.forward(add(h, f));
}

}  // namespace tarn
