// Training-side properties: gradients reach every parameter, attention modules' gradients
// match finite differences, dropout is reproducible from its (seed, counter) state, and a
// tiny model overfits a handful of pairs with each attention type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "framework/autograd.h"
#include "framework/optim/adamw.h"
#include "tests/common/gradcheck.h"
#include "tests/layers/bart_reference.h"
#include "tests/layers/layers_test_util.h"

namespace tarn::testing {
namespace {

struct Pairs {
  int64_t batch, s_len, t_len;
  std::vector<int32_t> src, tgt_in, labels;
  PaddingMask src_pad;
};

// `batch` random pairs of different lengths, padded as the batcher does: sources end in </s>
// and are padded with <pad>; labels end in </s> and are padded with -100; decoder inputs are
// the labels shifted right after </s>.
Pairs make_pairs(const BartConfig& c, int64_t batch, int64_t s_len, int64_t t_len, uint64_t seed) {
  Pairs p{batch, s_len, t_len, {}, {}, {}, {}};
  Philox rng(seed);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t sl = s_len - b % 3, tl = t_len - (b + 1) % 3;
    const std::vector<int32_t> s = random_ids(sl - 1, c.vocab_size, seed * 100 + 2 * b);
    const std::vector<int32_t> t = random_ids(tl - 1, c.vocab_size, seed * 100 + 2 * b + 1);
    for (int64_t j = 0; j < s_len; ++j)
      p.src.push_back(j < sl - 1 ? s[j] : j == sl - 1 ? c.eos_token_id : c.pad_token_id);
    for (int64_t j = 0; j < t_len; ++j) p.labels.push_back(j < tl - 1 ? t[j] : j == tl - 1 ? c.eos_token_id : -100);
  }
  p.src_pad = padding_mask(p.src, c.pad_token_id);
  p.tgt_in = shift_tokens_right(p.labels, {batch, t_len}, c.pad_token_id, c.decoder_start_token_id);
  return p;
}

Tensor loss_of(const BartForConditionalGeneration& model, const Pairs& p, int64_t* count = nullptr) {
  const Tensor logits = model.forward(p.src, {p.batch, p.s_len}, p.src_pad, p.tgt_in, {p.batch, p.t_len});
  return seq2seq_loss(logits, p.labels, model.config().pad_token_id, 0.0f, count);
}

TEST(BartTraining, ShiftTokensRightStartsWithEosAndMapsIgnoredLabelsToPad) {
  const std::vector<int32_t> labels = {7, 8, 2, -100, 9, 2, -100, -100};
  EXPECT_EQ(shift_tokens_right(labels, {2, 4}, 1, 2), (std::vector<int32_t>{2, 7, 8, 2, 2, 9, 2, 1}));
}

TEST(BartTraining, LossCountsOnlyRealLabels) {
  const BartConfig c = tiny_config(AttentionConfig::softmax_attention());
  BartForConditionalGeneration model(c, 1);
  const Pairs p = make_pairs(c, 3, 6, 5, 2);
  int64_t count = 0;
  const Tensor loss = loss_of(model, p, &count);
  int64_t real = 0;
  for (int32_t l : p.labels) real += l >= 0;
  EXPECT_EQ(count, real);
  // An untrained model is close to uniform over the vocabulary.
  EXPECT_NEAR(loss.item(), std::log(double(c.vocab_size)), 0.3);
  // A label equal to <pad> does not count either.
  std::vector<int32_t> labels = p.labels;
  labels[0] = c.pad_token_id;
  const Tensor logits = model.forward(p.src, {p.batch, p.s_len}, p.src_pad, p.tgt_in, {p.batch, p.t_len});
  seq2seq_loss(logits, labels, c.pad_token_id, 0.0f, &count);
  EXPECT_EQ(count, real - 1);
}

TEST(BartTraining, GradientsReachEveryParameterAndAreFinite) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
   for (float attention_dropout : {0.0f, 0.1f}) {  // 0.1: the softmax path that drops probabilities
    SCOPED_TRACE(attention_dropout);
    BartConfig c = config_for(s);
    c.dropout = 0.1f;
    c.attention_dropout = attention_dropout;
    c.activation_dropout = 0.1f;
    BartForConditionalGeneration model(c, 3);
    model.train();
    const Pairs p = make_pairs(c, 3, 7, 6, 4);
    loss_of(model, p).backward();
    for (const auto& [name, t] : model.named_parameters()) {
      const Tensor g = t->grad();
      ASSERT_TRUE(g.defined()) << name << " has no gradient";
      ASSERT_EQ(g.shape(), t->shape()) << name;
      double norm = 0;
      for (float x : g.to_vector()) {
        ASSERT_TRUE(std::isfinite(x)) << name;
        norm += double(x) * x;
      }
      EXPECT_GT(norm, 0.0) << name << " has an all-zero gradient";
    }
   }
  }
}

// The attention module's own gradients (projections, heads, masks, both kinds) against
// finite differences, with respect to its query and key/value inputs.
TEST(BartTraining, AttentionGradientsMatchFiniteDifferences) {
  DropoutStreams dropout(0);
  struct Case {
    AttentionConfig cfg;
    bool causal;
    bool cross;
  };
  const AttentionConfig sm = AttentionConfig::softmax_attention(), elu = AttentionConfig::linear_attention(FeatureMap::elu1);
  AttentionConfig favor = AttentionConfig::linear_attention(FeatureMap::favor);
  favor.favor_features = 6;
  const AttentionConfig exp = AttentionConfig::linear_attention(FeatureMap::exp);
  const AttentionConfig hedgehog = AttentionConfig::linear_attention(FeatureMap::hedgehog);
  AttentionConfig hybrid = elu;  // a window of 2 in 4 positions: both parts and the gate matter
  hybrid.kind = AttentionKind::hybrid;
  hybrid.window = 2;
  AttentionConfig hybrid_delta = hybrid;  // over the delta rule: its gates, convolutions and norm too
  hybrid_delta.global = AttentionKind::delta;
  hybrid_delta.chunk = 3;
  // Aligned cross-attention, plain and gated (issue 53), over chunks of 2 in 4-5 positions.
  AttentionConfig aligned = AttentionConfig::linear_attention(FeatureMap::taylor);
  aligned.align_decay = 0.7;
  aligned.chunk = 2;
  AttentionConfig aligned_gated = aligned;
  aligned_gated.align_gate = true;
  for (const Case& k : {Case{aligned, false, true}, Case{aligned_gated, false, true},Case{sm, false, true}, Case{sm, true, false}, Case{elu, false, true}, Case{elu, true, false},
                        Case{exp, true, false}, Case{favor, false, true}, Case{favor, true, false},
                        Case{hedgehog, false, true}, Case{hedgehog, true, false}, Case{hybrid, true, false},
                        Case{hybrid, false, false}, Case{hybrid_delta, true, false}, Case{hybrid_delta, false, false}}) {
    SCOPED_TRACE(k.cfg.str() + (k.causal ? " causal" : "") + (k.cross ? " cross" : ""));
    ParamInit init(7, 0.3f);
    MultiHeadAttention attn(8, 2, k.cfg, k.causal, 0.0f, init, dropout, k.cross);
    const int64_t nq = 4, nk = k.cross ? 5 : 4;
    PaddingMask pad(2 * nk, 0);
    if (k.cross) pad[nk + nk - 1] = pad[nk + nk - 2] = 1;
    Tensor q = random_tensor({2, nq, 8}, 1), kv = random_tensor({2, nk, 8}, 2);
    q.set_requires_grad(true);
    kv.set_requires_grad(true);
    GradcheckOptions opt;
    // exp's row max has kinks where the argmax changes: a smaller step stays clear of them.
    opt.eps = k.cfg.feature_map == FeatureMap::exp ? 1e-3 : 1e-2;
    // The delta rule's unit rows of short convolved vectors curve sharply: central differences
    // over 1e-2 are off by a few percent there (checked: 4% at 1e-2, within tolerance at 2e-3).
    if (k.cfg.has_delta_block()) opt.eps = 2e-3;
    if (k.cross) {
      EXPECT_TRUE(gradients_match([&](const std::vector<Tensor>& in) { return attn.forward(in[0], in[1], pad); },
                                  {q, kv}, opt));
    } else {
      EXPECT_TRUE(gradients_match([&](const std::vector<Tensor>& in) { return attn.forward(in[0], in[0], {}); },
                                  {q}, opt));
    }
  }
}

TEST(BartTraining, DropoutIsReproducibleFromItsState) {
  BartConfig c = tiny_config(AttentionConfig::softmax_attention());
  c.dropout = 0.2f;
  c.attention_dropout = 0.1f;
  c.activation_dropout = 0.1f;
  BartForConditionalGeneration model(c, 9);
  const Pairs p = make_pairs(c, 2, 5, 4, 1);
  NoGradGuard no_grad;
  model.eval();
  const std::vector<float> eval1 = loss_of(model, p).to_vector();
  EXPECT_EQ(model.dropout_state().counter, 0u);  // eval draws nothing
  model.train();
  const DropoutState start = model.dropout_state();
  const float a = loss_of(model, p).item();
  const DropoutState after_one = model.dropout_state();
  EXPECT_GT(after_one.counter, start.counter);
  const float b = loss_of(model, p).item();
  EXPECT_NE(a, b);  // the next step draws new masks
  EXPECT_NE(a, eval1[0]);
  model.set_dropout_state(start);  // as a resumed run would
  EXPECT_EQ(loss_of(model, p).item(), a);
  EXPECT_EQ(loss_of(model, p).item(), b);
  // Same seed, same masks in a fresh model.
  BartForConditionalGeneration twin(c, 9);
  twin.train();
  EXPECT_EQ(loss_of(twin, p).item(), a);
}

TEST(BartTraining, FavorProjectionsAreSeededBuffersRedrawnOnSchedule) {
  AttentionConfig favor = AttentionConfig::linear_attention(FeatureMap::favor);
  favor.favor_features = 20;
  favor.favor_redraw_every = 3;
  BartConfig c = tiny_config(favor);
  c.attention.encoder_self = AttentionConfig::softmax_attention();
  BartForConditionalGeneration model(c, 4), twin(c, 4), other(c, 5);
  // Decoder self- and cross-attention of two layers; the encoder uses softmax.
  const auto projections = model.favor_projections();
  ASSERT_EQ(projections.size(), 4u);
  EXPECT_EQ(projections[0].first, "model.decoder.layers.0.self_attn");
  EXPECT_EQ(projections[3].first, "model.decoder.layers.1.encoder_attn");
  int buffers = 0;
  for (const auto& [name, t] : model.named_buffers())
    if (name.find("favor_projection") != std::string::npos) {
      ++buffers;
      EXPECT_EQ(t->shape(), Shape({20, 16})) << name;
    }
  EXPECT_EQ(buffers, 4);
  const std::vector<float> w0 = projections[0].second->w.to_vector();
  EXPECT_EQ(twin.favor_projections()[0].second->w.to_vector(), w0);  // same seed, same draw
  EXPECT_NE(other.favor_projections()[0].second->w.to_vector(), w0);
  EXPECT_NE(projections[1].second->w.to_vector(), w0);  // each module its own stream
  EXPECT_EQ(model.favor_step(), 0);
  EXPECT_EQ(model.favor_step(), 0);
  EXPECT_EQ(model.favor_step(), 4);  // every 3 steps
  const std::vector<float> w1 = projections[0].second->w.to_vector();
  EXPECT_NE(w1, w0);
  // The buffer follows the redraw (a checkpoint saves the projection in use).
  for (const auto& [name, t] : model.named_buffers())
    if (name == "model.decoder.layers.0.self_attn.favor_projection") {
      EXPECT_EQ(t->to_vector(), w1);
    }
}

// A tiny model learns four pairs by heart: the loss over their real labels goes below 0.1.
void expect_overfits(const AttentionConfig& attention) {
  BartConfig c = tiny_config(attention, /*vocab=*/32);
  c.encoder_layers = c.decoder_layers = 2;
  BartForConditionalGeneration model(c, 1);
  model.train();
  const Pairs p = make_pairs(c, 4, 7, 6, 5);
  AdamWOptions opt;
  opt.lr = 3e-3f;
  opt.weight_decay = 0.0f;
  AdamW adam(model.named_parameters(), opt);
  float loss = 0;
  int steps = 0;
  for (; steps < 300; ++steps) {
    Tensor l = loss_of(model, p);
    loss = l.item();
    if (loss < 0.05f) break;
    l.backward();
    adam.step();
    adam.zero_grad();
  }
  model.eval();
  NoGradGuard no_grad;
  const float eval_loss = loss_of(model, p).item();
  EXPECT_LT(eval_loss, 0.1f) << attention.str() << ": train loss " << loss << " after " << steps << " steps";
  std::printf("[          ] %s: loss %.4f after %d AdamW steps\n", attention.str().c_str(), eval_loss, steps);
}

TEST(BartTraining, TinyModelOverfitsAFewPairsWithSoftmaxAttention) {
  expect_overfits(AttentionConfig::softmax_attention());
}

TEST(BartTraining, TinyModelOverfitsAFewPairsWithLinearElu1Attention) {
  expect_overfits(AttentionConfig::linear_attention(FeatureMap::elu1));
}

}  // namespace
}  // namespace tarn::testing
