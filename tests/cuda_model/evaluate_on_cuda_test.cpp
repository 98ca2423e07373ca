// app::evaluate (validation, `tarn eval`) on the emulated device: each batch goes up in one
// copy the host does not wait for, each batch's mean loss stays on the device, and the means
// come back in one copy at the end (issue 51): before, every batch's loss.item() waited for the
// device. The figures are the CPU's within the forward's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "data/tokenizer.h"
#include "kernels/emu/emu.h"
#include "tests/app/app_test_util.h"
#include "tests/cuda_model/emulated_cuda.h"
#include "app/evaluate.h"
#include "app/session.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {

TEST(EvaluateOnCuda, ReadsTheLossesBackInOneCopyAndMatchesTheCpu) {
  const Device device = testing::emulated_cuda();
  const std::string dir = testing::make_tiny_corpus("cuda_model_evaluate");
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, 1);  // one CPU step: trains the tokenizer
  for (const char* s : {"validation.every_steps=0", "checkpoints.every_steps=0"}) o.overrides.push_back(s);
  train(o);
  const Recipe recipe = load_recipe(o.recipe_path, o.overrides);
  const Tokenizer tok = Tokenizer::load(dir + "/spm.model");
  const auto valid = open_dataset(recipe, tok, dir + "/valid.txt", kEvalNoiseSeed, "valid");

  BartForConditionalGeneration model(model_config(recipe, tok.vocab_size()), 3);
  constexpr int64_t kTokens = 256, kBatches = 4;
  const EvalResult cpu = evaluate(model, *valid, kTokens, kBatches);
  ASSERT_EQ(cpu.batches, kBatches);
  model.to(device);
  emu::reset_host_waits();
  const EvalResult gpu = evaluate(model, *valid, kTokens, kBatches);
  const emu::HostWaits w = emu::host_waits();
  EXPECT_EQ(w.copies_to_host, 1u) << "every batch's loss in one copy";
  EXPECT_EQ(w.synchronizations, 0u);
  EXPECT_EQ(w.copies_to_device, 0u) << "no batch uploaded op by op";
  EXPECT_EQ(w.async_copies_to_device, static_cast<uint64_t>(kBatches)) << "one queued copy a batch";
  EXPECT_EQ(gpu.batches, cpu.batches);
  EXPECT_EQ(gpu.tokens, cpu.tokens);
  // The forward's f32 roundings in another order (the GEMMs, the reductions): far inside 1e-4
  // of the NLL for this model (tests/cuda_model/train_on_cuda_test.cpp bounds it per step).
  EXPECT_NEAR(gpu.nll_sum, cpu.nll_sum, 1e-4 * cpu.nll_sum);
}

}  // namespace
}  // namespace tarn::app
