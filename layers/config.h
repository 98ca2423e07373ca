#pragma once
// BartConfig: every number that fixes the shape and behaviour of the model (docs/design.md section
// 3). No YAML here: the recipe's model section (app/recipe/model_recipe.h) is a BartConfig whose
// keys its schema binds to these fields. Field names follow HuggingFace's BartConfig where one
// exists (d_model, encoder_layers, max_position_embeddings, ...); tarn has one head count and
// one feed-forward size for both stacks.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/attention_config.h"

namespace tarn {

// One attention stack of the BART layout: the setting every layer uses, or one per layer.
struct AttentionStack : AttentionConfig {
  AttentionStack() = default;
  AttentionStack(const AttentionConfig& every_layer) : AttentionConfig(every_layer) {}  // NOLINT: a stack of one setting
  // The stack's setting becomes `every_layer`'s, for every layer (any per-layer list is cleared).
  AttentionStack& operator=(const AttentionConfig& every_layer) {
    AttentionConfig::operator=(every_layer);
    per_layer.clear();
    return *this;
  }
  // Empty: every layer of the stack uses the stack's setting; else one entry per layer
  // (encoder_layers, decoder_layers, decoder_layers for the three stacks).
  std::vector<AttentionConfig> per_layer;
  const AttentionConfig& of(int64_t layer) const;  // the setting of `layer`
};

// The three attention stacks: encoder self-attention, decoder self-attention (always causal),
// and decoder-to-encoder attention.
struct AttentionStacks {
  AttentionStack encoder_self, decoder_self, cross;
};

struct BartConfig {
  int64_t vocab_size = 1000;
  int64_t d_model = 64;
  int64_t encoder_layers = 2;
  int64_t decoder_layers = 2;
  int64_t heads = 4;      // attention heads of every stack (HF's encoder_ and decoder_attention_heads)
  int64_t ffn_dim = 256;  // feed-forward inner size of every layer (HF's encoder_ and decoder_ffn_dim)
  int64_t max_position_embeddings = 128;

  double dropout = 0.1;             // hidden states (after embeddings, attention, fc2)
  double attention_dropout = 0.0;   // softmax probabilities (linear attention has none to drop)
  double activation_dropout = 0.0;  // after the GELU of the feed-forward
  bool scale_embedding = false;     // multiply token embeddings by sqrt(d_model); BART-base: false
  double init_std = 0.02;           // normal init of Linear / Embedding weights, as HF
  float layer_norm_eps = 1e-5f;

  int32_t bos_token_id = 0;
  int32_t pad_token_id = 1;
  int32_t eos_token_id = 2;
  int32_t decoder_start_token_id = 2;  // the target shifted right starts with </s>

  AttentionStacks attention;
  const AttentionConfig& encoder_self_attention_of(int64_t layer) const { return attention.encoder_self.of(layer); }
  const AttentionConfig& decoder_self_attention_of(int64_t layer) const { return attention.decoder_self.of(layer); }
  const AttentionConfig& cross_attention_of(int64_t layer) const { return attention.cross.of(layer); }

  // Presets. tiny: tests; small: the CPU default; base: BART-base dimensions (GPUs).
  static BartConfig tiny();
  static BartConfig small();
  static BartConfig base();
  static BartConfig preset(const std::string& name);  // "tiny" | "small" | "base"

  // Sets all three attention stacks at once (and clears any per-layer choice).
  BartConfig& with_attention(const AttentionConfig& a);

  // Throws tarn::Error naming the offending field, worded as the recipe's check of the same key
  // (e.g. "model.heads: expected a divisor of model.d_model = 100, got 12"). `prefix` is
  // prepended to field names.
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
