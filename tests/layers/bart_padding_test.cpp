// Padding never changes what real positions compute: pads appended to a source (masked as
// keys) or to a target (hidden by the causal mask, optionally also masked) leave the logits
// of the real positions as they were.
#include <gtest/gtest.h>

#include <algorithm>

#include "framework/autograd.h"
#include "tests/layers/layers_test_util.h"

namespace tarn::testing {
namespace {

constexpr double kTol = 2e-5;

std::vector<int32_t> pad_rows(const std::vector<int32_t>& ids, int64_t batch, int64_t len, int64_t extra,
                              int32_t pad, PaddingMask* mask) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < batch; ++b) {
    out.insert(out.end(), ids.begin() + b * len, ids.begin() + (b + 1) * len);
    out.insert(out.end(), static_cast<size_t>(extra), pad);
    if (mask) {
      mask->insert(mask->end(), static_cast<size_t>(len), 0);
      mask->insert(mask->end(), static_cast<size_t>(extra), 1);
    }
  }
  return out;
}

double relative(const std::vector<float>& a, const std::vector<float>& ref) {
  double m = 1e-6;
  for (float x : ref) m = std::max(m, std::fabs(double(x)));
  return max_abs_diff(a, ref) / m;
}

TEST(BartPadding, AppendedSourcePadsDoNotChangeTheLogits) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 2);
    model.eval();
    const int64_t batch = 2, s_len = 5, t_len = 4, extra = 3;
    const std::vector<int32_t> src = random_ids(batch * s_len, c.vocab_size, 1);
    const std::vector<int32_t> tgt = random_ids(batch * t_len, c.vocab_size, 2);
    NoGradGuard no_grad;
    const std::vector<float> plain = model.forward(src, {batch, s_len}, {}, tgt, {batch, t_len}).to_vector();
    PaddingMask mask;
    const std::vector<int32_t> padded = pad_rows(src, batch, s_len, extra, c.pad_token_id, &mask);
    const std::vector<float> with_pads =
        model.forward(padded, {batch, s_len + extra}, mask, tgt, {batch, t_len}).to_vector();
    EXPECT_LT(relative(with_pads, plain), kTol);
    // padding_mask() derives the same flags from the ids.
    EXPECT_EQ(padding_mask(padded, c.pad_token_id), mask);

    // The encoder output at real positions is unchanged too.
    const std::vector<float> enc = model.encode(src, {batch, s_len}, {}).to_vector();
    const std::vector<float> enc_padded = model.encode(padded, {batch, s_len + extra}, mask).to_vector();
    EXPECT_LT(relative(rows_prefix(enc_padded, batch, s_len + extra, s_len, c.d_model), enc), kTol);
  }
}

TEST(BartPadding, AppendedTargetPadsDoNotChangeEarlierLogits) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 3);
    model.eval();
    const int64_t batch = 2, s_len = 5, t_len = 4, extra = 2;
    const std::vector<int32_t> src = random_ids(batch * s_len, c.vocab_size, 4);
    const std::vector<int32_t> tgt = random_ids(batch * t_len, c.vocab_size, 5);
    NoGradGuard no_grad;
    const std::vector<float> plain = model.forward(src, {batch, s_len}, {}, tgt, {batch, t_len}).to_vector();
    PaddingMask tgt_mask;
    const std::vector<int32_t> padded = pad_rows(tgt, batch, t_len, extra, c.pad_token_id, &tgt_mask);
    const Shape shape{batch, t_len + extra};
    const std::vector<float> causal_only = model.forward(src, {batch, s_len}, {}, padded, shape).to_vector();
    EXPECT_LT(relative(rows_prefix(causal_only, batch, t_len + extra, t_len, c.vocab_size), plain), kTol);
    const std::vector<float> masked = model.forward(src, {batch, s_len}, {}, padded, shape, tgt_mask).to_vector();
    EXPECT_LT(relative(rows_prefix(masked, batch, t_len + extra, t_len, c.vocab_size), plain), kTol);
  }
}

// A row's logits do not depend on the other rows of its batch, however they are padded.
TEST(BartPadding, RowsOfABatchAreIndependent) {
  const BartConfig c = config_for(attention_setups()[2]);
  BartForConditionalGeneration model(c, 4);
  model.eval();
  const std::vector<int32_t> src = random_ids(6, c.vocab_size, 6), tgt = random_ids(4, c.vocab_size, 7);
  NoGradGuard no_grad;
  const std::vector<float> alone = model.forward(src, {1, 6}, {}, tgt, {1, 4}).to_vector();
  std::vector<int32_t> src2 = src, tgt2 = tgt;
  const std::vector<int32_t> other = {9, 10, c.pad_token_id, c.pad_token_id, c.pad_token_id, c.pad_token_id};
  src2.insert(src2.end(), other.begin(), other.end());
  tgt2.insert(tgt2.end(), {11, 12, 13, 14});
  const std::vector<float> both =
      model.forward(src2, {2, 6}, padding_mask(src2, c.pad_token_id), tgt2, {2, 4}).to_vector();
  EXPECT_LT(relative(std::vector<float>(both.begin(), both.begin() + alone.size()), alone), kTol);
}

// A short row padded up to a long one's length reads as it does alone, for every kind: routed
// attention's tree of landmarks is as deep as the model's longest source, not the batch's.
TEST(BartPadding, APaddedRowReadsAsItDoesAlone) {
  std::vector<AttentionSetup> setups = all_attention_setups();
  // and a tree that chooses one chunk a level (route_beam 0: route_top's 1 at every level): a
  // wrong choice shows more than a wrong mean
  const auto tree = std::find_if(setups.begin(), setups.end(),
                                 [](const AttentionSetup& s) { return s.name == "routed_tree_cross"; });
  ASSERT_NE(tree, setups.end());
  AttentionSetup narrow = *tree;
  narrow.name = "routed_tree_cross, top 1";
  narrow.cross.route_top = 1;
  narrow.cross.route_beam = 0;
  setups.push_back(narrow);
  for (const AttentionSetup& s : setups) {
    SCOPED_TRACE(s.name);
    const BartConfig c = config_for(s);
    BartForConditionalGeneration model(c, 4);
    model.eval();
    NoGradGuard no_grad;
    const std::vector<int32_t> src = random_ids(5, c.vocab_size, 8), tgt = random_ids(4, c.vocab_size, 9);
    const std::vector<float> alone = model.forward(src, {1, 5}, {}, tgt, {1, 4}).to_vector();
    std::vector<int32_t> src2 = src, tgt2 = tgt;
    src2.resize(11, c.pad_token_id);  // the short row padded to the long row's 11
    const std::vector<int32_t> other = random_ids(11, c.vocab_size, 10);
    src2.insert(src2.end(), other.begin(), other.end());
    tgt2.insert(tgt2.end(), {11, 12, 13, 14});
    const std::vector<float> both =
        model.forward(src2, {2, 11}, padding_mask(src2, c.pad_token_id), tgt2, {2, 4}).to_vector();
    EXPECT_LT(relative(std::vector<float>(both.begin(), both.begin() + alone.size()), alone), kTol);
  }
}

TEST(BartPadding, MismatchedMasksAndShapesAreErrors) {
  BartForConditionalGeneration model(tiny_config(AttentionConfig::softmax_attention()));
  const std::vector<int32_t> src = {5, 6, 7, 8}, tgt = {2, 9};
  EXPECT_THROW(model.forward(src, {2, 2}, PaddingMask(3, 0), tgt, {2, 1}), Error);
  EXPECT_THROW(model.forward(src, {2, 3}, {}, tgt, {2, 1}), Error);
  EXPECT_THROW(model.forward(src, {2, 2}, {}, tgt, {1, 2}), Error);
  EXPECT_THROW(model.forward(src, {1, 4}, {}, std::vector<int32_t>(40, 5), {1, 40}), Error);  // > max positions
}

}  // namespace
}  // namespace tarn::testing
