#pragma once
// BART's encoder and decoder layers: post-LayerNorm residual blocks (HF's BartEncoderLayer /
// BartDecoderLayer), with the parameter names and registration order HF uses.
//
//   encoder: h = LN(h + drop(self_attn(h)));                 h = LN(h + drop(fc2(drop_act(gelu(fc1(h))))))
//   decoder: h = LN(h + drop(causal_self_attn(h)));
//            h = LN(h + drop(encoder_attn(h, enc)));         h = LN(h + FFN(h))
#include <cstdint>
#include <string>

#include "framework/module.h"
#include "layers/attention.h"
#include "layers/config.h"
#include "layers/dropout.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"

namespace tarn {

// What both layers share: the dropout settings, the registration under HF's names, and the
// feed-forward block they end with. It holds no parameters (each layer constructs its own, in
// HF's order, which is also the order they draw from ParamInit).
class PostNormLayer : public Module {
 protected:
  PostNormLayer(const BartConfig& config, DropoutStreams& dropout);

  // Registers `attn` as `name` and `norm` as `name`_layer_norm (self_attn, encoder_attn).
  void register_attention(const std::string& name, MultiHeadAttention& attn, LayerNorm& norm);
  // Registers fc1, fc2 and final_layer_norm.
  void register_feed_forward(Linear& fc1, Linear& fc2, LayerNorm& final_layer_norm);
  // norm(h + drop(fc2(drop_act(gelu(fc1(h)))))).
  Tensor feed_forward(const Tensor& h, const Linear& fc1, const Linear& fc2, const LayerNorm& norm) const;
  // x dropped with the layer's dropout (attention outputs, fc2's output).
  Tensor dropped(const Tensor& x) const;

 private:
  float dropout_p_, activation_dropout_p_;
  DropoutStreams* dropout_;
};

class EncoderLayer : public PostNormLayer {
 public:
  // `index`: the layer's place in its stack, which picks its attention (BartConfig::*_of).
  EncoderLayer(const BartConfig& config, int64_t index, ParamInit& init, DropoutStreams& dropout);

  // x: (B, S, D); padding: (B, S) flags or empty -> (B, S, D).
  Tensor forward(const Tensor& x, const PaddingMask& padding) const;

  MultiHeadAttention self_attn;
  LayerNorm self_attn_layer_norm;
  Linear fc1, fc2;
  LayerNorm final_layer_norm;
};

// What one decoder layer carries between decoding steps.
struct DecoderLayerCache {
  AttentionCache self_attn;
  AttentionCache encoder_attn;
};

class DecoderLayer : public PostNormLayer {
 public:
  DecoderLayer(const BartConfig& config, int64_t index, ParamInit& init, DropoutStreams& dropout);

  // x: (B, T, D); self_padding: (B, T) flags or empty (the causal mask already hides what
  // follows a position, so right-padding needs none); encoder_out (B, S, D) with its padding.
  Tensor forward(const Tensor& x, const PaddingMask& self_padding, const Tensor& encoder_out,
                 const PaddingMask& encoder_padding) const;

  DecoderLayerCache start_decoding(const Tensor& encoder_out, const PaddingMask& encoder_padding) const;
  // x: (B, 1, D), the next position -> (B, 1, D); updates the cache.
  Tensor step(const Tensor& x, DecoderLayerCache& cache) const;

  MultiHeadAttention self_attn;
  LayerNorm self_attn_layer_norm;
  MultiHeadAttention encoder_attn;
  LayerNorm encoder_attn_layer_norm;
  Linear fc1, fc2;
  LayerNorm final_layer_norm;
};

}  // namespace tarn
