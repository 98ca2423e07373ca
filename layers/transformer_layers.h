#pragma once
// BART's encoder and decoder layers: post-LayerNorm residual blocks (HF's BartEncoderLayer /
// BartDecoderLayer), with the parameter names and registration order HF uses.
//
//   encoder: h = LN(h + drop(self_attn(h)));                 h = LN(h + drop(fc2(drop_act(gelu(fc1(h))))))
//   decoder: h = LN(h + drop(causal_self_attn(h)));
//            h = LN(h + drop(encoder_attn(h, enc)));         h = LN(h + FFN(h))
#include <cstdint>

#include "framework/module.h"
#include "layers/attention.h"
#include "layers/config.h"
#include "layers/dropout.h"
#include "layers/layer_norm.h"
#include "layers/linear.h"

namespace tarn {

class EncoderLayer : public Module {
 public:
  // `index`: the layer's place in its stack, which picks its attention (BartConfig::*_of).
  EncoderLayer(const BartConfig& config, int64_t index, ParamInit& init, DropoutStreams& dropout);

  // x: (B, S, D); padding: (B, S) flags or empty -> (B, S, D).
  Tensor forward(const Tensor& x, const PaddingMask& padding) const;

  MultiHeadAttention self_attn;
  LayerNorm self_attn_layer_norm;
  Linear fc1, fc2;
  LayerNorm final_layer_norm;

 private:
  float dropout_p_, activation_dropout_p_;
  DropoutStreams* dropout_;
};

// What one decoder layer carries between decoding steps.
struct DecoderLayerCache {
  AttentionCache self_attn;
  AttentionCache encoder_attn;
};

class DecoderLayer : public Module {
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

 private:
  Tensor feed_forward(const Tensor& h) const;  // h + FFN(h), then final_layer_norm
  float dropout_p_, activation_dropout_p_;
  DropoutStreams* dropout_;
};

}  // namespace tarn
