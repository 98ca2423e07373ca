// Incremental decoding (KV cache for softmax, the recurrent state S' for linear attention,
// precomputed cross-attention keys) gives the teacher-forcing logits position by position,
// and reorder() moves whole rows of the state as beam search needs.
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "layers/attention/delta.h"
#include "layers/attention/hybrid.h"
#include "layers/attention/linear.h"
#include "tests/layers/bart_reference.h"
#include "tests/layers/layers_test_util.h"

namespace tarn::testing {
namespace {

constexpr double kTol = 2e-5;  // relative to the largest logit

struct Batch {
  int64_t batch, s_len, t_len;
  std::vector<int32_t> src, tgt;
  PaddingMask src_pad;
};

Batch make_batch(const BartConfig& c, int64_t batch, int64_t s_len, int64_t t_len, uint64_t seed) {
  Batch b{batch, s_len, t_len, random_ids(batch * s_len, c.vocab_size, seed),
          random_ids(batch * t_len, c.vocab_size, seed + 1), PaddingMask(batch * s_len, 0)};
  for (int64_t r = 1; r < batch; ++r)  // row r has r padded source positions
    for (int64_t j = s_len - r; j < s_len; ++j) {
      b.src[r * s_len + j] = c.pad_token_id;
      b.src_pad[r * s_len + j] = 1;
    }
  return b;
}

double relative(const std::vector<float>& a, const std::vector<float>& ref) {
  double m = 1e-6;
  for (float x : ref) m = std::max(m, std::fabs(double(x)));
  return max_abs_diff(a, ref) / m;
}

TEST(BartDecoding, StepByStepLogitsEqualTeacherForcingForEachAttentionSetup) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 5);
    randomize_parameters(model, 6);
    model.eval();
    const Batch b = make_batch(c, 3, 6, 9, 7);
    NoGradGuard no_grad;
    const std::vector<float> tf = model.forward(b.src, {b.batch, b.s_len}, b.src_pad, b.tgt, {b.batch, b.t_len})
                                      .to_vector();
    const Tensor enc = model.encode(b.src, {b.batch, b.s_len}, b.src_pad);
    DecodingState st = model.start_decoding(enc, b.src_pad);
    for (int64_t t = 0; t < b.t_len; ++t) {
      std::vector<int32_t> tokens(b.batch);
      for (int64_t r = 0; r < b.batch; ++r) tokens[r] = b.tgt[r * b.t_len + t];
      const Tensor step = model.decode_step(st, tokens);
      ASSERT_EQ(step.shape(), Shape({b.batch, c.vocab_size}));
      std::vector<float> expected;
      for (int64_t r = 0; r < b.batch; ++r)
        expected.insert(expected.end(), tf.begin() + (r * b.t_len + t) * c.vocab_size,
                        tf.begin() + (r * b.t_len + t + 1) * c.vocab_size);
      EXPECT_LT(relative(step.to_vector(), expected), kTol) << "position " << t;
    }
    EXPECT_EQ(st.step, b.t_len);
  }
}

TEST(BartDecoding, LinearSelfAttentionStateDoesNotGrowWithLength) {
  const BartConfig c = tiny_config(AttentionConfig::linear_attention(FeatureMap::elu1));
  BartForConditionalGeneration model(c, 5);
  model.eval();
  const Batch b = make_batch(c, 2, 5, 12, 3);
  const Tensor enc = model.encode(b.src, {b.batch, b.s_len}, b.src_pad);
  DecodingState st = model.start_decoding(enc, b.src_pad);
  const Shape before = st.layers[0].self_attn.as<LinearState>().s.shape();
  for (int t = 0; t < 12; ++t) model.decode_step(st, {5, 6});
  EXPECT_EQ(st.layers[0].self_attn.as<LinearState>().s.shape(), before);
  EXPECT_EQ(before, Shape({2, 4, 16, 17}));  // (B, H, f, dh + 1)
  EXPECT_EQ(dynamic_cast<const KeyValueState*>(&st.layers[0].self_attn.state()), nullptr);  // no keys kept
}

TEST(BartDecoding, DeltaAndGatedStatesDoNotGrowWithLength) {
  for (const AttentionKind kind : {AttentionKind::delta, AttentionKind::gated}) {
    AttentionConfig a;
    a.kind = kind;
    const BartConfig c = tiny_config(a);
    BartForConditionalGeneration model(c, 5);
    model.eval();
    const Batch b = make_batch(c, 2, 5, 12, 3);
    const Tensor enc = model.encode(b.src, {b.batch, b.s_len}, b.src_pad);
    DecodingState st = model.start_decoding(enc, b.src_pad);
    const DeltaState& self = st.layers[0].self_attn.as<DeltaState>();
    const DeltaState& cross = st.layers[0].encoder_attn.as<DeltaState>();
    const std::vector<Shape> before = {self.state.shape(), self.q_tail.shape(), self.k_tail.shape(),
                                       self.v_tail.shape(), cross.state.shape()};
    for (int t = 0; t < 12; ++t) model.decode_step(st, {5, 6});
    const std::vector<Shape> after = {self.state.shape(), self.q_tail.shape(), self.k_tail.shape(),
                                      self.v_tail.shape(), cross.state.shape()};
    EXPECT_EQ(after, before);
    EXPECT_EQ(before[0], Shape({2, 4, 16, 16}));  // (B, H, dh, dh)
    EXPECT_EQ(before[1], Shape({2, 3, 64}));      // (B, conv_size - 1, D)
    EXPECT_EQ(before[4], Shape({2, 4, 16, 16}));  // cross-attention: one state per source
    EXPECT_EQ(dynamic_cast<const KeyValueState*>(&st.layers[0].self_attn.state()), nullptr);  // no keys kept
  }
}

// Hybrid keeps the last `window` keys and values and its global part's state, whatever the
// position: global linear (S' and z) and global delta (S and the convolutions' tails).
TEST(BartDecoding, HybridStatesStayWithinTheWindow) {
  for (const AttentionKind global : {AttentionKind::linear, AttentionKind::delta}) {
    AttentionConfig a = AttentionConfig::linear_attention();
    a.kind = AttentionKind::hybrid;
    a.window = 3;
    a.global = global;
    BartConfig c = tiny_config(AttentionConfig::linear_attention());
    c.attention.encoder_self = c.attention.decoder_self = a;
    SCOPED_TRACE(a.str());
    BartForConditionalGeneration model(c, 5);
    model.eval();
    const Batch b = make_batch(c, 2, 5, 12, 3);
    DecodingState st = model.start_decoding(model.encode(b.src, {b.batch, b.s_len}, b.src_pad), b.src_pad);
    const HybridState& self = st.layers[0].self_attn.as<HybridState>();
    // The global part's state: S (delta) or S' (linear); the convolutions' tails over delta only.
    auto global_state = [&] {
      return global == AttentionKind::delta ? dynamic_cast<const DeltaState&>(*self.global).state
                                            : dynamic_cast<const LinearState&>(*self.global).s;
    };
    const Shape state = global_state().shape();
    EXPECT_EQ(state, global == AttentionKind::delta ? Shape({2, 4, 16, 16}) : Shape({2, 4, 16, 17}));
    const auto* delta = dynamic_cast<const DeltaState*>(self.global.get());
    EXPECT_EQ(delta != nullptr && delta->q_tail.defined(), global == AttentionKind::delta);
    for (int t = 0; t < 12; ++t) {
      model.decode_step(st, {5, 6});
      EXPECT_EQ(self.local.key.size(2), std::min(t + 1, 3)) << "position " << t;
      EXPECT_EQ(global_state().shape(), state);
    }
  }
}

// Decode three tokens for three rows, reorder the rows as beam search would (a row dropped,
// one repeated), decode three more: the logits equal teacher forcing on the reordered
// histories.
TEST(BartDecoding, ReorderMovesStateRowsLikeBeamSearch) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 8);
    randomize_parameters(model, 9);
    model.eval();
    const Batch b = make_batch(c, 3, 6, 3, 10);
    const std::vector<int64_t> order = {2, 0, 0, 1};
    const int64_t more = 3, rows = 4, total = b.t_len + more;
    const std::vector<int32_t> next = random_ids(rows * more, c.vocab_size, 11);

    NoGradGuard no_grad;
    DecodingState st = model.start_decoding(model.encode(b.src, {b.batch, b.s_len}, b.src_pad), b.src_pad);
    for (int64_t t = 0; t < b.t_len; ++t) {
      std::vector<int32_t> tokens(b.batch);
      for (int64_t r = 0; r < b.batch; ++r) tokens[r] = b.tgt[r * b.t_len + t];
      model.decode_step(st, tokens);
    }
    reorder(st, order);
    EXPECT_EQ(st.batch, rows);

    // The reordered batch, decoded from scratch with teacher forcing.
    std::vector<int32_t> src2, tgt2;
    PaddingMask pad2;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = order[i];
      src2.insert(src2.end(), b.src.begin() + r * b.s_len, b.src.begin() + (r + 1) * b.s_len);
      pad2.insert(pad2.end(), b.src_pad.begin() + r * b.s_len, b.src_pad.begin() + (r + 1) * b.s_len);
      tgt2.insert(tgt2.end(), b.tgt.begin() + r * b.t_len, b.tgt.begin() + (r + 1) * b.t_len);
      tgt2.insert(tgt2.end(), next.begin() + i * more, next.begin() + (i + 1) * more);
    }
    const std::vector<float> tf = model.forward(src2, {rows, b.s_len}, pad2, tgt2, {rows, total}).to_vector();
    for (int64_t k = 0; k < more; ++k) {
      std::vector<int32_t> tokens(rows);
      for (int64_t i = 0; i < rows; ++i) tokens[i] = next[i * more + k];
      const std::vector<float> step = model.decode_step(st, tokens).to_vector();
      std::vector<float> expected;
      const int64_t t = b.t_len + k;
      for (int64_t i = 0; i < rows; ++i)
        expected.insert(expected.end(), tf.begin() + (i * total + t) * c.vocab_size,
                        tf.begin() + (i * total + t + 1) * c.vocab_size);
      EXPECT_LT(relative(step, expected), kTol) << "step " << k;
    }
  }
}

// clone() gives a state that later steps of the original do not touch (a plain copy aliases).
TEST(BartDecoding, ClonedStateIsIndependent) {
  for (const AttentionSetup& s : attention_setups()) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 2);
    model.eval();
    const Batch b = make_batch(c, 2, 4, 1, 3);
    DecodingState st = model.start_decoding(model.encode(b.src, {2, 4}, b.src_pad), b.src_pad);
    model.decode_step(st, {2, 2});
    DecodingState saved = clone(st);
    const std::vector<float> first = model.decode_step(st, {7, 8}).to_vector();
    model.decode_step(st, {9, 9});
    EXPECT_EQ(saved.step, 1);
    EXPECT_EQ(model.decode_step(saved, {7, 8}).to_vector(), first);
  }
}

TEST(BartDecoding, DecodeStepRejectsAWrongNumberOfTokens) {
  const BartConfig c = tiny_config(AttentionConfig::softmax_attention());
  BartForConditionalGeneration model(c);
  model.eval();
  const Batch b = make_batch(c, 2, 4, 2, 1);
  DecodingState st = model.start_decoding(model.encode(b.src, {2, 4}, b.src_pad), b.src_pad);
  EXPECT_THROW(model.decode_step(st, {5, 6, 7}), Error);
  EXPECT_THROW(reorder(st, {0, 2}), Error);
}

}  // namespace
}  // namespace tarn::testing
