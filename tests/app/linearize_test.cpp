// The linearize stage (attention transfer) on the imported HuggingFace fixture: the new attention
// learns to match softmax attention layer by layer while everything else stays as it was.
#include "app/linearize.h"

#include <gtest/gtest.h>

#include <map>

#include "data/batcher.h"
#include "framework/io/atomic_file.h"
#include "framework/io/state_dict.h"
#include "tests/app/app_test_util.h"
#include "app/checkpoint_state.h"
#include "app/hf_import.h"
#include "app/init_from.h"
#include "app/recipe/recipe.h"
#include "app/session.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {

const std::string kFixture = std::string(TARN_SOURCE_DIR) + "/tests/fixtures/hf_bart_tiny";

struct Started {
  std::string imported;
  Recipe recipe;
  std::optional<Tokenizer> tok;
  std::unique_ptr<BartForConditionalGeneration> model;
  std::unique_ptr<Dataset> data;
};

// The fixture imported, then a model of `overrides` started from it (model.init_from).
Started start_from_import(const std::string& name, const std::vector<std::string>& overrides) {
  Started s;
  const std::string dir = testing::fresh_dir("linearize_" + name);
  import_hf_bart(kFixture + "/hf", dir + "/imported");
  s.imported = dir + "/imported";
  s.recipe = parse_recipe(to_yaml(checkpoint_recipe(open_checkpoint_or_run(s.imported))), "ft.yaml", overrides);
  s.tok = Tokenizer::load(s.recipe.data.tokenizer.model);
  s.model = std::make_unique<BartForConditionalGeneration>(model_config(s.recipe, s.tok->vocab_size()), 3);
  init_from_checkpoint(s.imported, *s.tok, *s.model);
  s.data = open_dataset(s.recipe, *s.tok, kFixture + "/pairs.tsv", kEvalNoiseSeed, "train");
  return s;
}

std::map<std::string, std::vector<float>> values(const BartForConditionalGeneration& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : state_dict(model)) out[name] = std::vector<float>(t.f32(), t.f32() + t.numel());
  return out;
}

TEST(Linearize, HedgehogEncoderLearnsToMatchSoftmaxAndNothingElseMoves) {
  Started s = start_from_import("hedgehog", {"model.attention.encoder_self.kind=linear",
                               "model.attention.encoder_self.feature_map=hedgehog"});
  const auto trained = transfer_parameters(*s.model);
  ASSERT_EQ(trained.size(), 4u);  // hedgehog_q and hedgehog_k of both encoder layers
  for (const auto& [name, p] : trained) EXPECT_NE(name.find("hedgehog"), std::string::npos) << name;
  const auto before = values(*s.model);

  BatcherConfig bc;
  bc.plan.max_tokens = 512;
  Batcher batches(*s.data, bc);
  LinearizeOptions o;
  o.steps = 1;
  const double first = linearize(*s.model, batches, o).loss;
  o.steps = 60;
  o.lr = 3e-2;
  std::vector<LinearizeProgress> logged;
  const LinearizeProgress last = linearize(*s.model, batches, o, [&](const LinearizeProgress& p) { logged.push_back(p); });
  ASSERT_EQ(last.terms.size(), 2u);  // one term per encoder layer; the softmax modules record none
  EXPECT_EQ(last.terms[0].first, "model.encoder.layers.0.self_attn");
  EXPECT_LT(last.loss, 0.5 * first) << "transfer loss " << first << " -> " << last.loss;
  EXPECT_EQ(logged.size(), 2u);  // log_every 50: step 50 and the last

  const auto after = values(*s.model);
  int moved = 0;
  for (const auto& [name, v] : after) {
    const bool trainable = name.find("hedgehog") != std::string::npos;
    if (trainable) moved += v != before.at(name);
    else EXPECT_EQ(v, before.at(name)) << name << " changed but is frozen";
  }
  EXPECT_EQ(moved, 4);
  EXPECT_TRUE(s.model->training());  // left in the mode it was in
}

TEST(Linearize, DeltaDecoderTransfersItsOwnParametersOnly) {
  Started s = start_from_import("delta", {"model.attention.decoder_self.kind=delta"});
  const auto trained = transfer_parameters(*s.model);
  ASSERT_FALSE(trained.empty());
  for (const auto& [name, p] : trained)
    EXPECT_NE(name.find("model.decoder.layers."), std::string::npos) << name;
  BatcherConfig bc;
  bc.plan.max_tokens = 512;
  Batcher batches(*s.data, bc);
  LinearizeOptions o;
  o.steps = 1;
  const double first = linearize(*s.model, batches, o).loss;
  o.steps = 40;
  o.lr = 1e-2;
  const double last = linearize(*s.model, batches, o).loss;
  EXPECT_LT(last, first);
}

TEST(Linearize, RefusesAModelWithNothingToTransfer) {
  Started s = start_from_import("elu1", {"model.attention.encoder_self.kind=linear"});  // elu1: a fixed map
  BatcherConfig bc;
  bc.plan.max_tokens = 512;
  Batcher batches(*s.data, bc);
  LinearizeOptions o;
  o.steps = 2;
  try {
    linearize(*s.model, batches, o);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no attention parameters to transfer"), std::string::npos) << e.what();
  }
}

TEST(Linearize, TheShippedBartBaseRecipeStartsFromAnImportAndLinearizes) {
  const Recipe r = load_recipe(std::string(TARN_SOURCE_DIR) + "/recipes/bart-base-linear-encoder.yaml");
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.model.d_model, 768);  // facebook/bart-base's sizes: init_from refuses any other
  EXPECT_EQ(r.model.encoder_layers, 6);
  EXPECT_EQ(r.model.heads, 12);
  EXPECT_EQ(r.model.ffn_dim, 3072);
  EXPECT_EQ(r.model.max_position_embeddings, 1024);
  EXPECT_EQ(r.model.init_from, "runs/bart-base");
  EXPECT_EQ(r.data.tokenizer.model, "runs/bart-base/tokenizer.json");
  EXPECT_TRUE(r.data.bos);
  EXPECT_EQ(r.data.kind, "pairs");
  EXPECT_GT(r.linearize.steps, 0);
  EXPECT_EQ(r.model.attention.encoder_self.feature_map, kernels::cpu::FeatureMap::hedgehog);
}

TEST(Linearize, TheTrainerRunsTheStageBeforeANewRun) {
  const std::string dir = testing::fresh_dir("linearize_trainer");
  import_hf_bart(kFixture + "/hf", dir + "/imported");
  write_file_atomic(dir + "/ft.yaml", to_yaml(checkpoint_recipe(open_checkpoint_or_run(dir + "/imported"))));
  TrainOptions o;
  o.recipe_path = dir + "/ft.yaml";
  o.overrides = {"model.init_from=" + dir + "/imported",
                 "model.attention.encoder_self.kind=linear",
                 "model.attention.encoder_self.feature_map=hedgehog",
                 "linearize.steps=3",
                 "data.train=" + kFixture + "/pairs.tsv",
                 "checkpoints.dir=" + dir + "/run",
                 "logging.metrics_file=" + dir + "/run/metrics.jsonl",
                 "logging.tensorboard=off",
                 "training.max_steps=2",
                 "training.tokens_per_batch=512",
                 "training.threads=1",
                 "logging.every_steps=1"};
  const TrainSummary s = train(o);
  EXPECT_FALSE(s.failed);
  EXPECT_EQ(s.steps, 2);
}

}  // namespace
}  // namespace tarn::app
