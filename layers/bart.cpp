#include "layers/bart.h"

#include <algorithm>
#include <cmath>

#include "framework/autograd.h"
#include "framework/init.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"

namespace tarn {
namespace {

void check_ids(const char* what, const std::vector<int32_t>& ids, const Shape& shape) {
  TARN_ASSERT(shape.size() == 2, what, ": ids shape must be (B, N), got ", shape.str());
  TARN_ASSERT(static_cast<int64_t>(ids.size()) == shape.numel(), what, ": ", ids.size(),
              " ids do not fill shape ", shape.str());
}

void check_mask(const char* what, const PaddingMask& pad, const Shape& shape) {
  TARN_ASSERT(pad.empty() || static_cast<int64_t>(pad.size()) == shape.numel(), what, ": ", pad.size(),
              " padding flags for ids of shape ", shape.str());
}

float embed_scale(const BartConfig& c) {
  return c.scale_embedding ? std::sqrt(static_cast<float>(c.d_model)) : 1.0f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
template <class Layer>
BartStack<Layer>::BartStack(const BartConfig& c, int64_t layer_count, const Embedding& embed_tokens,
                            ParamInit& init, DropoutStreams& dropout)
    : embed_positions(c.max_position_embeddings, c.d_model, init),
      layernorm_embedding(c.d_model, c.layer_norm_eps),
      embed_tokens_(&embed_tokens),
      embed_scale_(embed_scale(c)),
      dropout_p_(static_cast<float>(c.dropout)),
      dropout_(&dropout) {
  this->register_module("embed_positions", embed_positions);
  for (int64_t i = 0; i < layer_count; ++i) {
    layers.push_back(std::make_unique<Layer>(c, i, init, dropout));
    this->register_module("layers." + std::to_string(i), *layers.back());
  }
  this->register_module("layernorm_embedding", layernorm_embedding);
}

template <class Layer>
Tensor BartStack<Layer>::embed_with_positions(const std::vector<int32_t>& ids, const Shape& shape,
                                              int64_t past_length) const {
  Tensor x = embed_tokens_->forward(ids, shape);  // (B, N, D)
  if (embed_scale_ != 1.0f) x = scale(x, embed_scale_);
  return add(x, embed_positions.forward(shape[1], past_length));  // (N, D) broadcast over B
}

template class BartStack<EncoderLayer>;
template class BartStack<DecoderLayer>;

// ---------------------------------------------------------------------------------------------
BartEncoder::BartEncoder(const BartConfig& c, const Embedding& embed_tokens, ParamInit& init,
                         DropoutStreams& dropout)
    : BartStack(c, c.encoder_layers, embed_tokens, init, dropout) {}

Tensor BartEncoder::forward(const std::vector<int32_t>& ids, const Shape& shape, const PaddingMask& padding) const {
  check_ids("encoder", ids, shape);
  check_mask("encoder", padding, shape);
  Tensor x = embed_with_positions(ids, shape, 0);
  x = dropout_->apply(layernorm_embedding.forward(x), dropout_p_, training());
  for (const auto& layer : layers) x = layer->forward(x, padding);
  return x;
}

// ---------------------------------------------------------------------------------------------
void reorder(DecodingState& state, const std::vector<int64_t>& indices) {
  for (int64_t i : indices)
    TARN_ASSERT(i >= 0 && i < state.batch, "reorder: index ", i, " out of range for a decoding batch of ", state.batch);
  for (DecoderLayerCache& layer : state.layers) {
    reorder(layer.self_attn, indices);
    reorder(layer.encoder_attn, indices);
  }
  state.batch = static_cast<int64_t>(indices.size());
}

DecodingState clone(const DecodingState& state) {
  DecodingState c = state;
  for (DecoderLayerCache& layer : c.layers) {
    layer.self_attn = clone(layer.self_attn);
    layer.encoder_attn = clone(layer.encoder_attn);
  }
  return c;
}

BartDecoder::BartDecoder(const BartConfig& c, const Embedding& embed_tokens, ParamInit& init,
                         DropoutStreams& dropout)
    : BartStack(c, c.decoder_layers, embed_tokens, init, dropout) {}

Tensor BartDecoder::embed(const std::vector<int32_t>& ids, const Shape& shape, int64_t past_length) const {
  return layernorm_embedding.forward(embed_with_positions(ids, shape, past_length));
}

Tensor BartDecoder::forward(const std::vector<int32_t>& ids, const Shape& shape, const Tensor& encoder_out,
                            const PaddingMask& encoder_padding, const PaddingMask& padding) const {
  check_ids("decoder", ids, shape);
  check_mask("decoder", padding, shape);
  TARN_ASSERT(encoder_out.dim() == 3 && encoder_out.size(0) == shape[0], "decoder: encoder output ",
              encoder_out.shape().str(), " does not match decoder batch ", shape[0]);
  Tensor x = dropout_->apply(embed(ids, shape, 0), dropout_p_, training());
  for (const auto& layer : layers) x = layer->forward(x, padding, encoder_out, encoder_padding);
  return x;
}

DecodingState BartDecoder::start_decoding(const Tensor& encoder_out, const PaddingMask& encoder_padding) const {
  NoGradGuard no_grad;
  TARN_ASSERT(encoder_out.dim() == 3, "start_decoding: encoder output must be (B, S, D), got ",
              encoder_out.shape().str());
  DecodingState st;
  st.batch = encoder_out.size(0);
  for (const auto& layer : layers) st.layers.push_back(layer->start_decoding(encoder_out, encoder_padding));
  return st;
}

Tensor BartDecoder::step(DecodingState& state, const std::vector<int32_t>& ids) const {
  NoGradGuard no_grad;
  TARN_ASSERT(static_cast<int64_t>(ids.size()) == state.batch, "decode step: ", ids.size(),
              " tokens for a decoding batch of ", state.batch);
  TARN_ASSERT(state.layers.size() == layers.size(), "decode step: the state has ", state.layers.size(),
              " layers, the decoder ", layers.size(), " (start_decoding first)");
  Tensor x = embed(ids, Shape{state.batch, 1}, state.step);
  for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->step(x, state.layers[i]);
  ++state.step;
  return x;
}

// ---------------------------------------------------------------------------------------------
BartModel::BartModel(const BartConfig& c, ParamInit& init, DropoutStreams& dropout)
    : shared(c.vocab_size, c.d_model, init, c.pad_token_id),
      encoder(c, shared, init, dropout),
      decoder(c, shared, init, dropout) {
  register_module("shared", shared);
  register_module("encoder", encoder);
  register_module("decoder", decoder);
}

namespace {
const BartConfig& validated(const BartConfig& c) {
  c.validate();
  return c;
}
}  // namespace

BartForConditionalGeneration::BartForConditionalGeneration(const BartConfig& config, uint64_t seed)
    : config_(validated(config)),
      dropout_(seed),
      deferred_init_(ParamInit::deferred(seed)),
      model(config_, deferred_init_, dropout_) {
  final_logits_bias = Tensor::zeros({1, config_.vocab_size});
  register_module("model", model);
  register_buffer("final_logits_bias", final_logits_bias);
  Philox rng(seed);
  init::bart_init_(*this, rng, {static_cast<float>(config_.init_std), config_.pad_token_id});
}

Tensor BartForConditionalGeneration::encode(const std::vector<int32_t>& src_ids, const Shape& src_shape,
                                            const PaddingMask& src_padding) const {
  return model.encoder.forward(src_ids, src_shape, src_padding);
}

Tensor BartForConditionalGeneration::lm_head(const Tensor& hidden) const {
  // final_logits_bias is a buffer (never trained): its (V) view needs no autograd.
  // Always f32, also under training.precision bf16: rounding the hidden state and the tied
  // embedding to bf16 perturbs every logit, noise the loss then learns through. Measured
  // on small-linear (600 steps, seeds 1 and 2): bf16 here left validation perplexity 17% and 4%
  // above f32's, f32 here 4.6% and 0.8%, for 1.55x f32's tokens/s instead of 1.74x (docs/measurements.md, bf16).
  return linear(hidden, model.shared.weight, final_logits_bias.view({config_.vocab_size}), Precision::f32);
}

Tensor BartForConditionalGeneration::decode(const std::vector<int32_t>& tgt_in_ids, const Shape& tgt_shape,
                                            const Tensor& encoder_out, const PaddingMask& src_padding,
                                            const PaddingMask& tgt_padding) const {
  return lm_head(model.decoder.forward(tgt_in_ids, tgt_shape, encoder_out, src_padding, tgt_padding));
}

Tensor BartForConditionalGeneration::forward(const std::vector<int32_t>& src_ids, const Shape& src_shape,
                                             const PaddingMask& src_padding, const std::vector<int32_t>& tgt_in_ids,
                                             const Shape& tgt_shape, const PaddingMask& tgt_padding) const {
  check_ids("forward (source)", src_ids, src_shape);
  check_ids("forward (target)", tgt_in_ids, tgt_shape);
  TARN_ASSERT(src_shape[0] == tgt_shape[0], "forward: source batch ", src_shape[0], " != target batch ",
              tgt_shape[0]);
  const Tensor encoder_out = encode(src_ids, src_shape, src_padding);
  return decode(tgt_in_ids, tgt_shape, encoder_out, src_padding, tgt_padding);
}

DecodingState BartForConditionalGeneration::start_decoding(const Tensor& encoder_out,
                                                           const PaddingMask& src_padding) const {
  return model.decoder.start_decoding(encoder_out, src_padding);
}

Tensor BartForConditionalGeneration::decode_step(DecodingState& state, const std::vector<int32_t>& token_ids) const {
  NoGradGuard no_grad;
  const Tensor h = model.decoder.step(state, token_ids);  // (B, 1, D)
  return lm_head(h).view({state.batch, config_.vocab_size});
}

std::vector<std::pair<std::string, FavorProjection*>> BartForConditionalGeneration::favor_projections() {
  std::vector<std::pair<std::string, FavorProjection*>> out;
  auto add = [&](const std::string& name, MultiHeadAttention& a) {
    if (FavorProjection* f = a.favor()) out.emplace_back(name, f);
  };
  for (size_t i = 0; i < model.encoder.layers.size(); ++i)
    add("model.encoder.layers." + std::to_string(i) + ".self_attn", model.encoder.layers[i]->self_attn);
  for (size_t i = 0; i < model.decoder.layers.size(); ++i) {
    const std::string l = "model.decoder.layers." + std::to_string(i);
    add(l + ".self_attn", model.decoder.layers[i]->self_attn);
    add(l + ".encoder_attn", model.decoder.layers[i]->encoder_attn);
  }
  return out;
}

std::vector<std::pair<std::string, MultiHeadAttention*>> BartForConditionalGeneration::attention_modules() {
  std::vector<std::pair<std::string, MultiHeadAttention*>> out;
  for (size_t i = 0; i < model.encoder.layers.size(); ++i)
    out.emplace_back("model.encoder.layers." + std::to_string(i) + ".self_attn", &model.encoder.layers[i]->self_attn);
  for (size_t i = 0; i < model.decoder.layers.size(); ++i) {
    const std::string l = "model.decoder.layers." + std::to_string(i);
    out.emplace_back(l + ".self_attn", &model.decoder.layers[i]->self_attn);
    out.emplace_back(l + ".encoder_attn", &model.decoder.layers[i]->encoder_attn);
  }
  return out;
}

void BartForConditionalGeneration::set_attention_transfer(AttentionTransfer* transfer) {
  for (auto& [name, a] : attention_modules()) a->set_transfer(transfer, name);
}

int BartForConditionalGeneration::favor_step() {
  int redrawn = 0;
  for (auto& [name, f] : favor_projections()) redrawn += f->step() ? 1 : 0;
  return redrawn;
}

std::vector<std::pair<std::string, std::string>> BartForConditionalGeneration::tied_parameter_aliases() {
  return {{"model.encoder.embed_tokens.weight", "model.shared.weight"},
          {"model.decoder.embed_tokens.weight", "model.shared.weight"},
          {"lm_head.weight", "model.shared.weight"}};
}

// ---------------------------------------------------------------------------------------------
Tensor seq2seq_loss(const Tensor& logits, const std::vector<int32_t>& labels, int32_t pad_id, float label_smoothing,
                    int64_t* count, double* nll_sum, int32_t ignore_index, Tensor* totals) {
  TARN_ASSERT(logits.dim() >= 2 && static_cast<int64_t>(labels.size()) * logits.shape().back() == logits.numel(),
              "seq2seq_loss: ", labels.size(), " labels for logits of shape ", logits.shape().str());
  CrossEntropyOptions opt;
  opt.ignore_index = ignore_index;
  opt.label_smoothing = label_smoothing;
  if (std::find(labels.begin(), labels.end(), pad_id) == labels.end())  // nothing to replace
    return cross_entropy(logits, labels, opt, count, nll_sum, totals);
  return cross_entropy(logits, seq2seq_targets(labels, pad_id, ignore_index), opt, count, nll_sum, totals);
}

std::vector<int32_t> seq2seq_targets(const std::vector<int32_t>& labels, int32_t pad_id, int32_t ignore_index) {
  std::vector<int32_t> targets(labels);
  for (int32_t& t : targets)
    if (t == pad_id) t = ignore_index;
  return targets;
}

std::vector<int32_t> shift_tokens_right(const std::vector<int32_t>& labels, const Shape& shape, int32_t pad_id,
                                        int32_t decoder_start_id, int32_t ignore_index) {
  check_ids("shift_tokens_right", labels, shape);
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<int32_t> out(labels.size());
  for (int64_t b = 0; b < rows; ++b) {
    if (cols == 0) continue;
    out[b * cols] = decoder_start_id;
    for (int64_t t = 1; t < cols; ++t) {
      const int32_t v = labels[b * cols + t - 1];
      out[b * cols + t] = v == ignore_index ? pad_id : v;
    }
  }
  return out;
}

PaddingMask padding_mask(const std::vector<int32_t>& ids, int32_t pad_id) {
  PaddingMask m(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) m[i] = ids[i] == pad_id ? 1 : 0;
  return m;
}

PaddingMask padding_from_attention_mask(const std::vector<float>& attention_mask) {
  PaddingMask m(attention_mask.size());
  for (size_t i = 0; i < attention_mask.size(); ++i) m[i] = attention_mask[i] == 0.0f ? 1 : 0;
  return m;
}

}  // namespace tarn
