#pragma once
// BartConfig: every number that fixes the shape and behaviour of the model (docs/design.md section
// 3). No YAML here: the trainer maps recipe keys onto these fields and calls validate().
// Field names follow HuggingFace's BartConfig where one exists (d_model, encoder_layers,
// encoder_attention_heads, encoder_ffn_dim, max_position_embeddings, ...).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/attention_config.h"

namespace tarn {

struct BartConfig {
  int64_t vocab_size = 1000;
  int64_t d_model = 64;
  int64_t encoder_layers = 2;
  int64_t decoder_layers = 2;
  int64_t encoder_attention_heads = 4;
  int64_t decoder_attention_heads = 4;
  int64_t encoder_ffn_dim = 256;
  int64_t decoder_ffn_dim = 256;
  int64_t max_position_embeddings = 128;

  float dropout = 0.1f;             // hidden states (after embeddings, attention, fc2)
  float attention_dropout = 0.0f;   // softmax probabilities (linear attention has none to drop)
  float activation_dropout = 0.0f;  // after the GELU of the feed-forward
  bool scale_embedding = false;     // multiply token embeddings by sqrt(d_model); BART-base: false
  float init_std = 0.02f;           // normal init of Linear / Embedding weights, as HF
  float layer_norm_eps = 1e-5f;

  int32_t bos_token_id = 0;
  int32_t pad_token_id = 1;
  int32_t eos_token_id = 2;
  int32_t decoder_start_token_id = 2;  // the target shifted right starts with </s>

  AttentionConfig encoder_self_attention;
  AttentionConfig decoder_self_attention;  // always causal
  AttentionConfig cross_attention;
  // Attention chosen per layer: empty = every layer of the stack uses the stack's setting above;
  // else one entry per layer of the stack (encoder_layers, decoder_layers, decoder_layers).
  std::vector<AttentionConfig> encoder_self_layers, decoder_self_layers, cross_layers;
  const AttentionConfig& encoder_self_attention_of(int64_t layer) const;
  const AttentionConfig& decoder_self_attention_of(int64_t layer) const;
  const AttentionConfig& cross_attention_of(int64_t layer) const;

  // Presets. tiny: tests; small: the CPU default; base: BART-base dimensions (GPUs).
  static BartConfig tiny();
  static BartConfig small();
  static BartConfig base();
  static BartConfig preset(const std::string& name);  // "tiny" | "small" | "base"

  // Sets all three attention stacks at once (and clears any per-layer choice).
  BartConfig& with_attention(const AttentionConfig& a);

  // Throws tarn::Error naming the offending field (e.g. "model.d_model: 100 is not divisible
  // by encoder_attention_heads = 12"). `prefix` is prepended to field names.
  void validate(const std::string& prefix = "model.") const;
  std::string str() const;  // one line, for logs

  // Sizes computed from the fields alone, in doubles (absurd recipes overflow int64): what
  // up-front memory checks need before anything is allocated.
  struct Footprint {
    double embedding_parameters = 0;  // tokens (tied with the output layer) and both position tables
    double encoder_parameters = 0;    // every encoder layer
    double decoder_parameters = 0;    // every decoder layer
    double attention_parameters = 0;  // of those two, what the attention kinds add beyond the 4
                                      // projections (delta blocks with their conv_size taps,
                                      // hybrid gates, Taylor and Hedgehog maps)
    double buffer_values = 0;         // the output bias, FAVOR+ projections
    double parameters() const { return embedding_parameters + encoder_parameters + decoder_parameters; }
  };
  Footprint footprint() const;

  // One attention module's parameters beyond its 4 projections, and its buffers' values (FAVOR+'s
  // projection), in doubles; `cross`: decoder-to-encoder attention.
  static double attention_parameters(const AttentionConfig& a, double d_model, double heads, bool cross);
  static double attention_buffer_values(const AttentionConfig& a, double d_model, double heads);
  // Every attention module's setting: per stack, once with count = the stack's layer count when
  // it has no per-layer list (layer -1), else once per entry (count 1, layer its index). The
  // memory estimates walk the model through it, whatever the layer count.
  enum class Stack { encoder_self, decoder_self, cross };
  void for_each_attention(
      const std::function<void(Stack stack, int64_t layer, const AttentionConfig& a, double count)>& f) const;
};

}  // namespace tarn
