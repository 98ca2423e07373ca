#pragma once
// The BART encoder-decoder (docs/design.md section 3), laid out as HuggingFace's
// BartForConditionalGeneration so that named_parameters() gives HF's names and shapes:
//
//   model.shared.weight                               (vocab, d)   tied: encoder/decoder
//   model.encoder.embed_positions.weight              (max_pos + 2, d)        embed_tokens and
//   model.encoder.layers.{i}.self_attn.{k,v,q,out}_proj.{weight,bias}          the LM head
//   model.encoder.layers.{i}.{self_attn_layer_norm,fc1,fc2,final_layer_norm}.{weight,bias}
//   model.encoder.layernorm_embedding.{weight,bias}
//   model.decoder.embed_positions.weight, model.decoder.layers.{i}.self_attn.*,
//   ...self_attn_layer_norm, encoder_attn.*, encoder_attn_layer_norm, fc1, fc2, final_layer_norm,
//   model.decoder.layernorm_embedding.{weight,bias}
//   final_logits_bias                                 (1, vocab) buffer, zeros
//
// The tied table is listed once, as model.shared.weight (HF's named_parameters() does the same;
// its state_dict also repeats it as model.{encoder,decoder}.embed_tokens.weight and
// lm_head.weight: an exporter writes those aliases from tied_parameter_aliases()).
//
// Ids are std::vector<int32_t> laid out row-major with a shape (B, N); padding masks are
// (B, N) bytes, nonzero = padding (PaddingMask, layers/attention.h).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/module.h"
#include "layers/config.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer_norm.h"
#include "layers/transformer_layers.h"

namespace tarn {

// What the encoder and the decoder share: the tied token embedding, scaled and added to
// learned positions, a layernorm, and a stack of `Layer`s, under HF's names (embed_positions,
// layers.{i}, layernorm_embedding, registered in that order).
template <class Layer>
class BartStack : public Module {
 public:
  LearnedPositionalEmbedding embed_positions;
  std::vector<std::unique_ptr<Layer>> layers;
  LayerNorm layernorm_embedding;

 protected:
  BartStack(const BartConfig& config, int64_t layer_count, const Embedding& embed_tokens, ParamInit& init,
            DropoutStreams& dropout);

  // ids (B, N) -> their token embeddings, scaled, plus positions past_length .. past_length + N - 1.
  Tensor embed_with_positions(const std::vector<int32_t>& ids, const Shape& shape, int64_t past_length) const;

  const Embedding* embed_tokens_;  // model.shared, not registered here (tied)
  float embed_scale_, dropout_p_;
  DropoutStreams* dropout_;
};

class BartEncoder : public BartStack<EncoderLayer> {
 public:
  BartEncoder(const BartConfig& config, const Embedding& embed_tokens, ParamInit& init, DropoutStreams& dropout);

  // ids (B, S) -> hidden states (B, S, D).
  Tensor forward(const std::vector<int32_t>& ids, const Shape& shape, const PaddingMask& padding) const;
};

// Everything decoding carries from one step to the next, for a batch of B rows (B = batch x
// beams in beam search). A plain copy aliases the tensors (and linear self-attention updates
// its state in place): clone() gives an independent one.
struct DecodingState {
  int64_t batch = 0;
  int64_t step = 0;  // tokens consumed so far = position of the next one
  std::vector<DecoderLayerCache> layers;
};

// Row i of every state tensor <- row indices[i] (beam search: indices select surviving beams;
// they may repeat and change the batch size).
void reorder(DecodingState& state, const std::vector<int64_t>& indices);
DecodingState clone(const DecodingState& state);

class BartDecoder : public BartStack<DecoderLayer> {
 public:
  BartDecoder(const BartConfig& config, const Embedding& embed_tokens, ParamInit& init, DropoutStreams& dropout);

  // ids (B, T) -> hidden states (B, T, D), teacher forcing (causal).
  Tensor forward(const std::vector<int32_t>& ids, const Shape& shape, const Tensor& encoder_out,
                 const PaddingMask& encoder_padding, const PaddingMask& padding = {}) const;

  DecodingState start_decoding(const Tensor& encoder_out, const PaddingMask& encoder_padding) const;
  // One token per row (B) -> hidden states (B, 1, D) of that position.
  Tensor step(DecodingState& state, const std::vector<int32_t>& ids) const;

 private:
  Tensor embed(const std::vector<int32_t>& ids, const Shape& shape, int64_t past_length) const;
};

// HF's BartModel: the shared table, the encoder and the decoder.
class BartModel : public Module {
 public:
  BartModel(const BartConfig& config, ParamInit& init, DropoutStreams& dropout);

  Embedding shared;
  BartEncoder encoder;
  BartDecoder decoder;
};

class BartForConditionalGeneration : public Module {
 public:
  // Weights drawn as HF's _init_weights does, from Philox streams keyed by `seed`; dropout
  // masks from (seed, counter) (layers/dropout.h) until set_dropout_state() says otherwise.
  explicit BartForConditionalGeneration(const BartConfig& config, uint64_t seed = 0);

  // Teacher forcing: src (B, S) with its padding, decoder inputs (B, T) -> logits (B, T, V).
  // tgt_padding is optional: with causal self-attention, right-padding needs no mask.
  Tensor forward(const std::vector<int32_t>& src_ids, const Shape& src_shape, const PaddingMask& src_padding,
                 const std::vector<int32_t>& tgt_in_ids, const Shape& tgt_shape,
                 const PaddingMask& tgt_padding = {}) const;

  Tensor encode(const std::vector<int32_t>& src_ids, const Shape& src_shape, const PaddingMask& src_padding) const;
  Tensor decode(const std::vector<int32_t>& tgt_in_ids, const Shape& tgt_shape, const Tensor& encoder_out,
                const PaddingMask& src_padding, const PaddingMask& tgt_padding = {}) const;
  // Hidden states (..., D) -> logits (..., V) = h sharedᵀ + final_logits_bias.
  Tensor lm_head(const Tensor& hidden) const;

  // Generation (no autograd, eval semantics: no dropout whatever training() says).
  // encoder_out (B, S, D) from encode(); the cross-attention keys/values (or their linear
  // summaries) are computed here once.
  DecodingState start_decoding(const Tensor& encoder_out, const PaddingMask& src_padding) const;
  // One token per row -> logits (B, V) of the next token; equals row `state.step` of forward().
  Tensor decode_step(DecodingState& state, const std::vector<int32_t>& token_ids) const;

  const BartConfig& config() const { return config_; }

  // Random state beyond the weights, for checkpoints. Dropout: (seed, counter).
  DropoutState dropout_state() const { return dropout_.state(); }
  void set_dropout_state(const DropoutState& s) { dropout_.set_state(s); }
  // FAVOR+ projections by attention module name ("model.decoder.layers.0.self_attn"); empty
  // without favor. Their `w` is also a buffer ("...self_attn.favor_projection"); a checkpoint
  // keeps `rng` and `steps` too. favor_step() is called once per training step: it counts
  // and redraws those whose favor_redraw_every has come; returns how many it redrew.
  std::vector<std::pair<std::string, FavorProjection*>> favor_projections();
  // Every attention module by name ("model.decoder.layers.0.encoder_attn"), in forward order.
  std::vector<std::pair<std::string, MultiHeadAttention*>> attention_modules();
  // Attention transfer (layers/attention.h) in every attention module; null stops it.
  void set_attention_transfer(AttentionTransfer* transfer);
  int favor_step();

  // The names HF's state_dict also gives the tied table: {alias, "model.shared.weight"}.
  static std::vector<std::pair<std::string, std::string>> tied_parameter_aliases();

 private:
  BartConfig config_;
  mutable DropoutStreams dropout_;  // before `model`: the layers keep a pointer to it
  ParamInit deferred_init_;         // allocates only: bart_init_ draws the weights by name

 public:
  BartModel model;
  Tensor final_logits_bias;  // (1, vocab) buffer
};

// Mean cross-entropy over the labels that count: those equal to ignore_index (HF's -100) or
// to pad_id are skipped. logits (B, T, V), labels B*T ids. `count` receives how many counted
// (sum NLL = mean * count, for perplexity); `nll_sum` the summed NLL without smoothing, from the
// same pass (with smoothing the loss is not the NLL), read back from the device; `totals` the
// pass's sums left where they are (cross_entropy in framework/ops/nn.h).
Tensor seq2seq_loss(const Tensor& logits, const std::vector<int32_t>& labels, int32_t pad_id,
                    float label_smoothing = 0.0f, int64_t* count = nullptr, double* nll_sum = nullptr,
                    int32_t ignore_index = -100, Tensor* totals = nullptr);
// The targets seq2seq_loss hands cross_entropy: labels with pad_id replaced by ignore_index.
// Given them as its labels it makes no copy, so a StagedBatch (framework/staging.h) that holds
// them serves the loss too.
std::vector<int32_t> seq2seq_targets(const std::vector<int32_t>& labels, int32_t pad_id, int32_t ignore_index = -100);

// HF's shift_tokens_right: decoder inputs from labels (B, T): [start, labels[:, :-1]], with
// ignore_index (-100) replaced by pad_id.
std::vector<int32_t> shift_tokens_right(const std::vector<int32_t>& labels, const Shape& shape, int32_t pad_id,
                                        int32_t decoder_start_id, int32_t ignore_index = -100);

// Padding flags (nonzero = pad) of ids equal to pad_id.
PaddingMask padding_mask(const std::vector<int32_t>& ids, int32_t pad_id);
// Padding flags from an HF-style attention mask (1 = token, 0 = padding), as data/batch.h's
// src_mask / tgt_mask.
PaddingMask padding_from_attention_mask(const std::vector<float>& attention_mask);

}  // namespace tarn
