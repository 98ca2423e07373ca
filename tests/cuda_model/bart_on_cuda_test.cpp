// The BART model on cuda:0 (the emulated CUDA backend) against the same model on the CPU:
// Module::to moves every weight, and the loss, every gradient and greedy decoding agree.
#include <gtest/gtest.h>

#include <vector>

#include "framework/autograd.h"
#include "layers/bart.h"
#include "tests/cuda_model/emulated_cuda.h"
#include "tests/layers/layers_test_util.h"

namespace tarn {
namespace {

using testing::emulated_cuda;
using testing::max_relative_difference;

struct Batch {
  Shape src_shape{2, 7}, tgt_shape{2, 5};
  std::vector<int32_t> src, tgt_in, labels;
  PaddingMask src_pad;
};

// Two sequences, the second padded in its last two source positions.
Batch batch(int64_t vocab) {
  Batch b;
  b.src = testing::random_ids(14, vocab, 3);
  b.tgt_in = testing::random_ids(10, vocab, 4);
  b.labels = testing::random_ids(10, vocab, 5);
  b.src_pad.assign(14, 0);
  b.src_pad[12] = b.src_pad[13] = 1;
  b.src[12] = b.src[13] = 1;
  return b;
}

void expect_model_matches_on_cuda(const testing::AttentionSetup& setup) {
  SCOPED_TRACE(setup.name);
  const Device cuda = emulated_cuda();
  const BartConfig cfg = testing::config_for(setup);
  BartForConditionalGeneration on_cpu(cfg, 11), on_cuda(cfg, 11);
  on_cuda.to(cuda);
  for (const auto& [name, t] : on_cuda.named_parameters()) {
    ASSERT_EQ(t->device(), cuda) << name;
    ASSERT_TRUE(t->requires_grad()) << name;
  }
  const Batch b = batch(cfg.vocab_size);
  // Each result's relative bound from the roundings on its path (tests/cuda_model/emulated_cuda.h):
  // the loss's forward path (7 source, 5 target positions, 10 labels), twice that for a
  // gradient (the backward retraces it), and the decoding steps' forward path.
  // Delta and gated attentions add their recurrences' roundings (4 taps of convolution).
  const int64_t head = cfg.d_model / cfg.heads;
  auto recurrence = [&](const AttentionConfig& a, int64_t n) {
    return a.is_gated_recurrence() ? testing::delta_attention_path(head, n, a.conv_size) : 0;
  };
  const int64_t path = testing::bart_forward_path(cfg.d_model, cfg.heads, cfg.ffn_dim,
                                                  cfg.encoder_layers, cfg.decoder_layers, cfg.vocab_size, 7, 5, 10) +
                       cfg.encoder_layers * recurrence(setup.encoder_self, 7) +
                       cfg.decoder_layers * (recurrence(setup.decoder_self, 5) + recurrence(setup.cross, 7));
  const int64_t gemms = testing::bart_gemms_on_path(cfg.encoder_layers, cfg.decoder_layers);
  const double forward_tol = testing::bart_tolerance(path, gemms);
  const double gradient_tol = testing::bart_tolerance(2 * path, 2 * gemms);
  const Tensor loss_cpu = seq2seq_loss(on_cpu.forward(b.src, b.src_shape, b.src_pad, b.tgt_in, b.tgt_shape),
                                       b.labels, cfg.pad_token_id);
  const Tensor loss_cuda = seq2seq_loss(on_cuda.forward(b.src, b.src_shape, b.src_pad, b.tgt_in, b.tgt_shape),
                                        b.labels, cfg.pad_token_id);
  ASSERT_EQ(loss_cuda.device(), cuda);
  EXPECT_NEAR(loss_cuda.item(), loss_cpu.item(), forward_tol * loss_cpu.item());
  loss_cpu.backward();
  loss_cuda.backward();
  const auto pc = on_cpu.named_parameters(), pg = on_cuda.named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    const Tensor gc = pc[i].second->grad(), gg = pg[i].second->grad();
    ASSERT_TRUE(gc.defined() && gg.defined()) << pc[i].first;
    EXPECT_EQ(gg.device(), cuda) << pc[i].first;
    // Relative to the tensor's largest gradient, or 1e-4 where all of them are smaller (a
    // parameter the loss hardly sees: compared absolutely at the scale of this model's gradients).
    EXPECT_LE(max_relative_difference(gg.to_vector(), gc.to_vector(), 1e-4), gradient_tol) << pc[i].first;
  }

  // Incremental decoding: the caches start on the model's device.
  NoGradGuard no_grad;
  on_cpu.eval();
  on_cuda.eval();
  const Tensor enc_cpu = on_cpu.encode(b.src, b.src_shape, b.src_pad);
  const Tensor enc_cuda = on_cuda.encode(b.src, b.src_shape, b.src_pad);
  DecodingState s_cpu = on_cpu.start_decoding(enc_cpu, b.src_pad);
  DecodingState s_cuda = on_cuda.start_decoding(enc_cuda, b.src_pad);
  std::vector<int32_t> next = {2, 2};
  for (int t = 0; t < 3; ++t) {
    const Tensor l_cpu = on_cpu.decode_step(s_cpu, next), l_cuda = on_cuda.decode_step(s_cuda, next);
    EXPECT_LE(max_relative_difference(l_cuda.to_vector(), l_cpu.to_vector()), forward_tol) << "step " << t;
    next = {static_cast<int32_t>(4 + t), static_cast<int32_t>(5 + t)};
  }
}

TEST(BartOnCuda, LossGradientsAndDecodingMatchTheCpuForEveryAttention) {
  for (const testing::AttentionSetup& s : testing::all_attention_setups()) expect_model_matches_on_cuda(s);
}

TEST(BartOnCuda, ModuleToKeepsTiedWeightsTied) {
  const Device cuda = emulated_cuda();
  BartForConditionalGeneration m(testing::config_for(testing::attention_setups()[1]), 1);
  m.to(cuda);
  EXPECT_EQ(m.model.shared.weight.device(), cuda);
  EXPECT_EQ(m.final_logits_bias.device(), cuda);
  m.to(Device::cpu());
  EXPECT_EQ(m.model.shared.weight.device(), Device::cpu());
  EXPECT_TRUE(m.model.shared.weight.requires_grad());
}

}  // namespace
}  // namespace tarn
