// model.init_from: a run starts from an imported HuggingFace BART (tests/fixtures/hf_bart_tiny)
// with its attention replaced; what matches is loaded, what the new attention adds is new.
#include "app/init_from.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "tests/app/app_test_util.h"
#include "app/checkpoint_state.h"
#include "app/evaluate.h"
#include "app/hf_import.h"
#include "app/recipe/recipe.h"
#include "app/session.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {

const std::string kFixture = std::string(TARN_SOURCE_DIR) + "/tests/fixtures/hf_bart_tiny";

std::string imported(const std::string& name) {
  const std::string dir = testing::fresh_dir("init_" + name);
  import_hf_bart(kFixture + "/hf", dir + "/imported");
  return dir + "/imported";
}

// The imported checkpoint's recipe with `overrides` applied, as a user's fine-tuning recipe.
Recipe recipe_of(const std::string& imp, const std::vector<std::string>& overrides) {
  const Recipe r = checkpoint_recipe(open_checkpoint_or_run(imp));
  return parse_recipe(to_yaml(r), "finetune.yaml", overrides);
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(InitFrom, SameModelLoadsEveryTensorAndScoresAsTheImport) {
  const std::string imp = imported("same");
  const Recipe r = recipe_of(imp, {});
  const Tokenizer tok = Tokenizer::load(r.data.tokenizer.model);
  BartForConditionalGeneration model(model_config(r, tok.vocab_size()), /*seed=*/7);
  const InitFromReport rep = init_from_checkpoint(imp, tok, model);
  EXPECT_TRUE(rep.fresh.empty());
  EXPECT_TRUE(rep.dropped.empty());
  EXPECT_EQ(rep.loaded.size(), state_dict(model).size());
  auto ds = open_dataset(r, tok, kFixture + "/pairs.tsv", kEvalNoiseSeed, "eval");
  const std::string path = kFixture + "/expected.json";
  const double hf = json::as_double(json::parse(read_file(path), path).at("pairs_mean_nll"), "nll");
  EXPECT_NEAR(evaluate(model, *ds, 4096).mean_nll(), hf, 1e-5 * hf);
}

TEST(InitFrom, DeltaEncoderKeepsProjectionsAndStartsItsOwnParametersFresh) {
  const std::string imp = imported("delta");
  const Recipe r = recipe_of(imp, {"model.attention.encoder_self.kind=delta"});
  const Tokenizer tok = Tokenizer::load(r.data.tokenizer.model);
  BartForConditionalGeneration model(model_config(r, tok.vocab_size()), /*seed=*/7);
  const InitFromReport rep = init_from_checkpoint(imp, tok, model);
  ASSERT_FALSE(rep.fresh.empty());
  for (const std::string& n : rep.fresh)
    EXPECT_EQ(n.rfind("model.encoder.layers.", 0), 0u) << n << " is new but not the encoder's attention";
  EXPECT_TRUE(rep.dropped.empty());
  for (const char* p : {"q_proj", "k_proj", "v_proj", "out_proj"})
    EXPECT_TRUE(has(rep.loaded, std::string("model.encoder.layers.0.self_attn.") + p + ".weight")) << p;
  // The loaded values are the checkpoint's.
  const SafetensorsFile f = load_safetensors(open_checkpoint_or_run(imp).path("model.safetensors"));
  for (const auto& [name, t] : state_dict(model)) {
    if (name != "model.encoder.layers.1.self_attn.q_proj.weight") continue;
    const Tensor& want = f.at(name);
    ASSERT_EQ(t.numel(), want.numel());
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.f32()[i], want.f32()[i]);
  }
}

TEST(InitFrom, RefusesATensorWhoseShapeDiffers) {
  const std::string imp = imported("shape");
  const Recipe r = recipe_of(imp, {"model.max_positions=32", "data.max_source_len=32", "data.max_target_len=32"});
  const Tokenizer tok = Tokenizer::load(r.data.tokenizer.model);
  BartForConditionalGeneration model(model_config(r, tok.vocab_size()));
  try {
    init_from_checkpoint(imp, tok, model);
    FAIL() << "a shape mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.encoder.embed_positions.weight: (66, 16) there, (34, 16) here"),
              std::string::npos)
        << e.what();
  }
}

TEST(InitFrom, TrainingALinearEncoderFromTheImportRuns) {
  const std::string imp = imported("train");
  const std::string dir = std::filesystem::path(imp).parent_path().string();
  write_file_atomic(dir + "/finetune.yaml", to_yaml(checkpoint_recipe(open_checkpoint_or_run(imp))));
  TrainOptions o;
  o.recipe_path = dir + "/finetune.yaml";
  o.overrides = {"model.init_from=" + imp,
                 "model.attention.encoder_self.kind=linear",
                 "model.attention.encoder_self.feature_map=elu1",
                 "data.train=" + kFixture + "/pairs.tsv",
                 "checkpoints.dir=" + dir + "/run",
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
