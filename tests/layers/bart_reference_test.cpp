// The tiny model's forward against a naive double-precision composition of the same math
// (tests/layers/bart_reference.h): embeddings with offset-2 positions, layernorm_embedding,
// post-LN encoder and decoder layers, softmax or linear attention, tied LM head + bias.
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "tests/common/gradcheck.h"
#include "tests/layers/bart_reference.h"
#include "tests/layers/layers_test_util.h"

namespace tarn::testing {
namespace {

void expect_matches_reference(BartConfig c, uint64_t seed) {
  BartForConditionalGeneration model(c, seed);
  randomize_parameters(model, seed + 1);
  model.eval();
  const int64_t batch = 2, s_len = 7, t_len = 6;
  std::vector<int32_t> src = random_ids(batch * s_len, c.vocab_size, seed + 2);
  const std::vector<int32_t> tgt = random_ids(batch * t_len, c.vocab_size, seed + 3);
  // Row 1 has three padded source positions.
  PaddingMask src_pad(batch * s_len, 0);
  for (int64_t j = 4; j < s_len; ++j) {
    src[s_len + j] = c.pad_token_id;
    src_pad[s_len + j] = 1;
  }
  NoGradGuard no_grad;
  const Tensor logits = model.forward(src, {batch, s_len}, src_pad, tgt, {batch, t_len});
  ASSERT_EQ(logits.shape(), Shape({batch, t_len, c.vocab_size}));
  const Mat ref = BartReference(model).forward(src, batch, s_len, src_pad, tgt, t_len);
  EXPECT_LT(relative_error(logits.to_vector(), ref), 2e-5) << c.str();
}

TEST(BartReference, ForwardMatchesNaiveLoopsForEachAttentionSetup) {
  for (const AttentionSetup& s : all_attention_setups()) {
    SCOPED_TRACE(s.name);
    expect_matches_reference(config_for(s), 11);
  }
}

TEST(BartReference, ForwardMatchesNaiveLoopsWithScaledEmbeddingsAndOneLayerEach) {
  BartConfig c = tiny_config(AttentionConfig::softmax_attention());
  c.scale_embedding = true;
  c.encoder_layers = c.decoder_layers = 1;
  c.heads = 2;  // one head count and feed-forward size for both stacks (hf_import refuses two)
  c.ffn_dim = 96;
  expect_matches_reference(c, 21);
  c.with_attention(AttentionConfig::linear_attention(FeatureMap::elu1));
  expect_matches_reference(c, 22);
}

}  // namespace
}  // namespace tarn::testing
