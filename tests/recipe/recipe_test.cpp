// The recipe schema: shipped recipes, defaults and presets, overrides, the to_yaml round trip,
// warnings, help output and file checks. Malformed recipes are in malformed_recipes_test.cpp.
#include "app/recipe/recipe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sys/stat.h>

#include "framework/config/schema.h"
#include "tests/config/config_test_util.h"

namespace tarn {
namespace {

using testing::config_issues;
using testing::first_issue;
using testing::ScratchDir;
using testing::source_path;
using testing::yaml_files;

const char* kMinimal = "data:\n  train: corpus/train.txt\n";

// Each `attention` (lines under model.attention of a minimal bad.yaml) is refused with an error
// that contains its message.
void expect_refused(const std::vector<std::pair<std::string, std::string>>& attention_and_message) {
  for (const auto& [attention, message] : attention_and_message) {
    try {
      parse_recipe(std::string(kMinimal) + "model:\n  attention:\n" + attention, "bad.yaml");
      ADD_FAILURE() << attention << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// ------------------------------------------------------------------------------ shipped recipes

TEST(ShippedRecipes, EveryRecipeValidatesWithoutWarnings) {
  const auto recipes = yaml_files("recipes");
  ASSERT_GE(recipes.size(), 5u);
  for (const std::string& path : recipes) {
    SCOPED_TRACE(path);
    Recipe r;
    ASSERT_NO_THROW(r = load_recipe(path)) << [&] {
      try {
        load_recipe(path);
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  }
}

TEST(ShippedRecipes, TheExpectedRecipesExistWithTheirDefiningSettings) {
  const Recipe tiny = load_recipe(source_path("recipes/tiny.yaml"));
  EXPECT_EQ(tiny.model.preset, "tiny");
  EXPECT_EQ(tiny.model.d_model, 64);
  EXPECT_GT(tiny.training.max_steps, 0);
  EXPECT_LE(tiny.training.max_steps, 100);
  EXPECT_EQ(tiny.data.train, "work/tiny/train.txt");

  const Recipe small = load_recipe(source_path("recipes/small-linear.yaml"));
  EXPECT_EQ(small.model.preset, "small");
  EXPECT_EQ(small.training.device, "cpu");
  EXPECT_EQ(small.training.max_time_minutes, 10);
  for (const AttentionConfig* a : {&small.model.attention.encoder_self, &small.model.attention.decoder_self,
                                   &small.model.attention.cross}) {
    EXPECT_EQ(a->kind, AttentionKind::linear);
    EXPECT_EQ(a->feature_map, kernels::cpu::FeatureMap::elu1);
  }
  EXPECT_EQ(small.checkpoints.dir, "runs/small-linear");  // {recipe} resolved
  EXPECT_EQ(small.logging.metrics_file, "runs/small-linear/metrics.jsonl");
  EXPECT_EQ(small.logging.tensorboard, "runs/small-linear");
  EXPECT_EQ(small.data.tokenizer.train.model_prefix, "work/wordnet/spm8000");

  const Recipe softmax = load_recipe(source_path("recipes/small-softmax.yaml"));
  EXPECT_EQ(softmax.model.attention.encoder_self.kind, AttentionKind::softmax);
  EXPECT_EQ(softmax.model.attention.decoder_self.kind, AttentionKind::softmax);
  EXPECT_EQ(softmax.model.attention.cross.kind, AttentionKind::softmax);

  const Recipe encoder = load_recipe(source_path("recipes/small-linear-encoder.yaml"));
  EXPECT_EQ(encoder.model.attention.encoder_self.kind, AttentionKind::linear);
  EXPECT_EQ(encoder.model.attention.decoder_self.kind, AttentionKind::softmax);
  EXPECT_EQ(encoder.model.attention.cross.kind, AttentionKind::softmax);

  // small-delta and small-gated: their kind in both self-attention stacks, the aligned Taylor
  // map in cross-attention (docs/measurements.md, "Attention that recalls": it recalls the source where one
  // delta or gated state written over it does not).
  for (const auto& [path, kind] : {std::pair{"recipes/small-delta.yaml", AttentionKind::delta},
                                    std::pair{"recipes/small-gated.yaml", AttentionKind::gated}}) {
    const Recipe r = load_recipe(source_path(path));
    for (const AttentionConfig* a : {&r.model.attention.encoder_self, &r.model.attention.decoder_self}) {
      EXPECT_EQ(a->kind, kind) << path;
      EXPECT_EQ(a->conv_size, 4) << path;
    }
    const AttentionConfig& cross = r.model.attention.cross;
    EXPECT_EQ(cross.kind, AttentionKind::linear) << path;
    EXPECT_EQ(cross.feature_map, kernels::cpu::FeatureMap::taylor) << path;
    EXPECT_EQ(cross.taylor_order, 2) << path;
    EXPECT_DOUBLE_EQ(cross.align_decay, 0.9) << path;
    EXPECT_TRUE(r.warnings.empty()) << path;
  }

  // Their first forms: the kind in every stack, cross-attention one state written over the source.
  for (const auto& [path, kind] : {std::pair{"recipes/small-delta-everywhere.yaml", AttentionKind::delta},
                                    std::pair{"recipes/small-gated-everywhere.yaml", AttentionKind::gated}}) {
    const Recipe r = load_recipe(source_path(path));
    for (const AttentionConfig* a : {&r.model.attention.encoder_self, &r.model.attention.decoder_self,
                                     &r.model.attention.cross}) {
      EXPECT_EQ(a->kind, kind) << path;
      EXPECT_EQ(a->conv_size, 4) << path;
    }
    EXPECT_TRUE(r.warnings.empty()) << path;
  }

  // small-delta-taylor: small-delta without the alignment.
  const Recipe delta_taylor = load_recipe(source_path("recipes/small-delta-taylor.yaml"));
  EXPECT_EQ(delta_taylor.model.attention.encoder_self.kind, AttentionKind::delta);
  EXPECT_EQ(delta_taylor.model.attention.decoder_self.kind, AttentionKind::delta);
  EXPECT_EQ(delta_taylor.model.attention.cross.kind, AttentionKind::linear);
  EXPECT_EQ(delta_taylor.model.attention.cross.feature_map, kernels::cpu::FeatureMap::taylor);
  EXPECT_EQ(delta_taylor.model.attention.cross.taylor_order, 2);  // Based's (docs/measurements.md: order 4 was no better)
  EXPECT_DOUBLE_EQ(delta_taylor.model.attention.cross.align_decay, 0.0);
  EXPECT_TRUE(delta_taylor.warnings.empty());

  // small-align-gate (issue 53): small-delta with the gate on its aligned cross-attention.
  const Recipe align_gate = load_recipe(source_path("recipes/small-align-gate.yaml"));
  EXPECT_EQ(align_gate.model.attention.encoder_self.kind, AttentionKind::delta);
  EXPECT_EQ(align_gate.model.attention.decoder_self.kind, AttentionKind::delta);
  const AttentionConfig& gated_cross = align_gate.model.attention.cross;
  EXPECT_TRUE(align_gate.model.attention.cross.per_layer.empty());
  EXPECT_EQ(gated_cross.kind, AttentionKind::linear);
  EXPECT_EQ(gated_cross.feature_map, kernels::cpu::FeatureMap::taylor);
  EXPECT_DOUBLE_EQ(gated_cross.align_decay, 0.9);
  EXPECT_TRUE(gated_cross.align_gate);
  EXPECT_DOUBLE_EQ(gated_cross.align_gate_bias, -3.0);  // the gates start on the plain read
  EXPECT_TRUE(align_gate.warnings.empty());

  // small-recall (issue 53): small-align-gate's cross-attention in decoder layers 1 and 3,
  // small-routed's in 2 and 4, as a tree above 64 landmarks choosing 8 a level (the same read up
  // to 1,024 source tokens).
  const Recipe recall = load_recipe(source_path("recipes/small-recall.yaml"));
  EXPECT_EQ(recall.model.attention.encoder_self.kind, AttentionKind::delta);
  EXPECT_EQ(recall.model.attention.decoder_self.kind, AttentionKind::delta);
  AttentionConfig routed_tree = load_recipe(source_path("recipes/small-routed.yaml")).model.attention.cross;
  routed_tree.route_root = 64;
  routed_tree.route_beam = 8;
  ASSERT_EQ(recall.model.attention.cross.per_layer.size(), 4u);
  for (size_t layer = 0; layer < 4; ++layer) {
    const AttentionConfig& want = layer % 2 == 0 ? gated_cross : routed_tree;
    EXPECT_EQ(recall.model.attention.cross.per_layer[layer].str(), want.str()) << "layer " << layer;
  }
  EXPECT_TRUE(recall.warnings.empty());
  {  // The gate needs the decayed read it gates: an error naming the key, the file and the line.
    try {
      parse_recipe(std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: linear, align_gate: true}\n",
                   "bad.yaml");
      ADD_FAILURE() << "align_gate without align_decay was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.yaml:5: model.attention.cross.align_gate: needs align_decay > 0"),
                std::string::npos)
          << e.what();
    }
  }
  {  // The gate's starting bias needs the gate; with it, the recipe keeps the value.
    const std::string cross = std::string(kMinimal) +
                              "model:\n  attention:\n    cross: {kind: linear, feature_map: taylor, align_decay: 0.9, ";
    try {
      parse_recipe(cross + "align_gate_bias: -3}\n", "bad.yaml");
      ADD_FAILURE() << "align_gate_bias without align_gate was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.yaml:5: model.attention.cross.align_gate_bias: needs align_gate: true"),
                std::string::npos)
          << e.what();
    }
    const Recipe biased = parse_recipe(cross + "align_gate: true, align_gate_bias: -3}\n", "good.yaml");
    EXPECT_DOUBLE_EQ(biased.model.attention.cross.align_gate_bias, -3.0);
    EXPECT_EQ(biased.model.attention.cross.str(), "linear(taylor, align 0.9 gated from -3)");
  }

  const Recipe hybrid = load_recipe(source_path("recipes/small-hybrid.yaml"));
  for (const AttentionStack* stack : {&hybrid.model.attention.encoder_self, &hybrid.model.attention.decoder_self}) {
    EXPECT_TRUE(stack->per_layer.empty());
    EXPECT_EQ(stack->kind, AttentionKind::hybrid);
    EXPECT_EQ(stack->global, AttentionKind::delta);
    EXPECT_EQ(stack->window, 64);
  }
  EXPECT_EQ(hybrid.model.attention.cross.kind, AttentionKind::hybrid);
  EXPECT_EQ(hybrid.model.attention.cross.global, AttentionKind::linear);
  EXPECT_EQ(hybrid.model.attention.cross.window, 64);
  EXPECT_EQ(hybrid.model.attention.cross.feature_map, kernels::cpu::FeatureMap::taylor);
  EXPECT_TRUE(hybrid.warnings.empty());

  const Recipe base = load_recipe(source_path("recipes/base-linear.yaml"));
  EXPECT_EQ(base.model.d_model, 768);
  EXPECT_EQ(base.model.heads, 12);
  EXPECT_EQ(base.model.encoder_layers, 6);
  EXPECT_EQ(base.model.ffn_dim, 3072);
  EXPECT_EQ(base.training.device, "cuda");
}

// The GPU recipes timed beside PyTorch's BART (tools/gpu_check.sh perf): BART-base sized, and
// only the attention differs, so that their tokens/s compare.
TEST(ShippedRecipes, BaseRecipesAreBartBaseAndDifferOnlyInAttention) {
  const Recipe linear = load_recipe(source_path("recipes/base-linear.yaml"));
  for (const char* other : {"recipes/base-softmax.yaml", "recipes/base-delta.yaml", "recipes/base-hybrid.yaml"}) {
    Recipe r = load_recipe(source_path(other));
    EXPECT_EQ(r.model.d_model, 768) << other;
    EXPECT_EQ(r.model.heads, 12) << other;
    EXPECT_EQ(r.model.encoder_layers, 6) << other;
    EXPECT_EQ(r.model.decoder_layers, 6) << other;
    EXPECT_EQ(r.model.ffn_dim, 3072) << other;
    EXPECT_TRUE(r.warnings.empty()) << other;
    EXPECT_NE(first_difference(linear, r), "") << other << " has base-linear's attention";
    r.model.attention = linear.model.attention;
    r.checkpoints.dir = linear.checkpoints.dir;
    r.logging.metrics_file = linear.logging.metrics_file;
    r.logging.tensorboard = linear.logging.tensorboard;
    EXPECT_EQ(first_difference(linear, r), "") << other;
  }
}

TEST(ShippedRecipes, SmallRecipesDifferOnlyInAttention) {
  // The comparison between them is only fair if nothing else changes.
  const Recipe linear = load_recipe(source_path("recipes/small-linear.yaml"));
  for (const char* other : {"recipes/small-softmax.yaml", "recipes/small-linear-encoder.yaml", "recipes/small-delta.yaml",
                            "recipes/small-gated.yaml", "recipes/small-delta-taylor.yaml", "recipes/small-delta-everywhere.yaml",
                            "recipes/small-gated-everywhere.yaml", "recipes/small-hybrid.yaml",
                            "recipes/small-align-gate.yaml", "recipes/small-routed.yaml", "recipes/small-recall.yaml"}) {
    Recipe r = load_recipe(source_path(other));
    r.model.attention = linear.model.attention;
    r.model.attention_layers = linear.model.attention_layers;  // small-recall's cross-attention per layer
    r.checkpoints.dir = linear.checkpoints.dir;
    r.logging.metrics_file = linear.logging.metrics_file;
    r.logging.tensorboard = linear.logging.tensorboard;
    EXPECT_EQ(first_difference(linear, r), "") << other;
  }
}

TEST(ShippedRecipes, TheMainJobsRecipeIsSmallDeltaWithSmallerBatches) {
  // The 10-minute recipe changes only what a time budget on 2 cores needs: the batch, and the
  // validation and checkpoint intervals that count its steps. Model, attention, data and
  // optimiser stay small-delta's, whose quality runs docs/measurements.md quotes.
  const Recipe delta = load_recipe(source_path("recipes/small-delta.yaml"));
  Recipe quick = load_recipe(source_path("recipes/small-delta-10min.yaml"));
  EXPECT_EQ(quick.training.tokens_per_batch, 512);
  EXPECT_DOUBLE_EQ(quick.training.max_time_minutes, 10);
  EXPECT_TRUE(quick.warnings.empty());
  quick.training.tokens_per_batch = delta.training.tokens_per_batch;
  quick.validation = delta.validation;
  quick.checkpoints.every_steps = delta.checkpoints.every_steps;
  quick.checkpoints.dir = delta.checkpoints.dir;
  quick.logging.metrics_file = delta.logging.metrics_file;
  quick.logging.tensorboard = delta.logging.tensorboard;
  EXPECT_EQ(first_difference(delta, quick), "");
}

// ------------------------------------------------------------------------------ defaults

TEST(RecipeDefaults, MinimalRecipeGetsEveryDefault) {
  const Recipe r = parse_recipe(kMinimal, "minimal.yaml");
  Recipe expected;  // the struct's defaults
  expected.data.train = "corpus/train.txt";
  expected.checkpoints.dir = "runs/minimal";
  expected.logging.metrics_file = "runs/minimal/metrics.jsonl";
  expected.logging.tensorboard = "runs/minimal";
  expected.data.tokenizer.train.model_prefix = "corpus/spm8000";
  EXPECT_EQ(first_difference(r, expected), "");
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.source, "minimal.yaml");
}

TEST(RecipeDefaults, StructDefaultsAreTheSmallPreset) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "model:\n  preset: small\n");
  const Recipe d;
  EXPECT_EQ(r.model.d_model, d.model.d_model);
  EXPECT_EQ(r.model.heads, d.model.heads);
  EXPECT_EQ(r.model.ffn_dim, d.model.ffn_dim);
  EXPECT_EQ(r.model.max_position_embeddings, d.model.max_position_embeddings);
}

TEST(RecipeDefaults, PresetFillsSizesAndExplicitSizesWin) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "model:\n  preset: base\n  encoder_layers: 2\n");
  EXPECT_EQ(r.model.d_model, 768);
  EXPECT_EQ(r.model.heads, 12);
  EXPECT_EQ(r.model.decoder_layers, 6);
  EXPECT_EQ(r.model.encoder_layers, 2);
  EXPECT_EQ(r.model.max_position_embeddings, 1024);
}

// The attention keys parse straight into the type the model and the kernels read, once.
TEST(RecipeAttention, StacksParseIntoTheModelsAttentionConfig) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                "model:\n  attention:\n    encoder_self: {kind: softmax}\n"
                                "    cross: {kind: linear, feature_map: favor, favor_features: 32, eps: 1.0e-5}\n");
  EXPECT_EQ(r.model.attention.encoder_self.kind, AttentionKind::softmax);
  EXPECT_EQ(r.model.attention.decoder_self.kind, AttentionKind::linear);  // the recipe's default
  EXPECT_EQ(r.model.attention.decoder_self.feature_map, kernels::cpu::FeatureMap::elu1);
  EXPECT_EQ(r.model.attention.cross.feature_map, kernels::cpu::FeatureMap::favor);
  EXPECT_EQ(r.model.attention.cross.favor_features, 32);
  EXPECT_EQ(r.model.attention.cross.eps, 1.0e-5);
  const std::string yaml = to_yaml(r);
  EXPECT_NE(yaml.find("feature_map: favor"), std::string::npos) << yaml;
  try {
    parse_recipe(std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: quadratic, feature_map: cosine}\n",
                 "q.yaml");
    FAIL() << "an unknown attention kind and feature map were accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("q.yaml:5: model.attention.cross.kind: expected one of softmax, linear, delta, gated, hybrid, routed, got "
                        "\"quadratic\""),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("model.attention.cross.feature_map: expected one of elu1, relu, exp, favor, taylor, hedgehog, identity"),
              std::string::npos)
        << what;
  }
}

TEST(RecipeAttention, PerLayerListsResolveOverTheStacksSettings) {
  // Settings beside `layers` (here given after it, and one by --set) apply to every entry that
  // does not set them; a name is the entry's kind.
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n    encoder_self:\n"
                                    "      layers: [linear, linear, linear, {kind: hybrid, window: 128, eps: 1.0e-3}]\n"
                                    "      feature_map: taylor\n",
                                "p.yaml", {"model.attention.encoder_self.eps=1.0e-4"});
  const std::vector<AttentionConfig>& layers = r.model.attention.encoder_self.per_layer;
  ASSERT_EQ(layers.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(layers[i].kind, AttentionKind::linear) << i;
    EXPECT_EQ(layers[i].feature_map, kernels::cpu::FeatureMap::taylor) << i;
    EXPECT_EQ(layers[i].eps, 1.0e-4) << i;
  }
  EXPECT_EQ(layers[3].kind, AttentionKind::hybrid);
  EXPECT_EQ(layers[3].window, 128);
  EXPECT_EQ(layers[3].feature_map, kernels::cpu::FeatureMap::taylor);
  EXPECT_EQ(layers[3].eps, 1.0e-3);
  EXPECT_TRUE(r.model.attention.decoder_self.per_layer.empty());
  EXPECT_TRUE(r.warnings.empty());
  // The list round-trips through the written recipe (what `tarn config` prints and checkpoints keep).
  const std::string yaml = to_yaml(r);
  EXPECT_NE(yaml.find("layers: [linear, linear, linear, {kind: hybrid, window: 128, eps: 1.0e-3}]"), std::string::npos)
      << yaml;
  const Recipe back = parse_recipe(yaml, "written.yaml");
  EXPECT_EQ(first_difference(r, back), "");
  ASSERT_EQ(back.model.attention.encoder_self.per_layer.size(), 4u);
  EXPECT_EQ(back.model.attention.encoder_self.per_layer[3].window, 128);
  EXPECT_EQ(back.model.attention.encoder_self.per_layer[0].eps, 1.0e-4);
  // A whole stack replaced by --set, as any other section; [] returns to one setting per stack.
  const Recipe set = parse_recipe(std::string(kMinimal), "m.yaml",
                                  {"model.attention.decoder_self={layers: [softmax, delta, delta, delta]}"});
  ASSERT_EQ(set.model.attention.decoder_self.per_layer.size(), 4u);
  EXPECT_EQ(set.model.attention.decoder_self.per_layer[0].kind, AttentionKind::softmax);
  EXPECT_EQ(set.model.attention.decoder_self.per_layer[1].kind, AttentionKind::delta);
  const Recipe cleared = parse_recipe(yaml, "written.yaml", {"model.attention.encoder_self.layers=[]"});
  EXPECT_TRUE(cleared.model.attention.encoder_self.per_layer.empty());
}

TEST(RecipeAttention, HybridGlobalPartIsLinearDeltaOrGated) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n"
                                    "    encoder_self: {kind: hybrid, global: delta, window: 16, conv_size: 2}\n"
                                    "    decoder_self: {layers: [delta, delta, delta, {kind: hybrid, global: gated}]}\n",
                                "g.yaml");
  EXPECT_EQ(r.model.attention.encoder_self.global, AttentionKind::delta);
  EXPECT_TRUE(r.model.attention.encoder_self.has_delta_block());
  EXPECT_TRUE(r.model.attention.encoder_self.erases());
  EXPECT_FALSE(r.model.attention.encoder_self.uses_feature_map());
  EXPECT_EQ(r.model.attention.encoder_self.conv_size, 2);
  EXPECT_EQ(r.model.attention.encoder_self.str(), "hybrid(window 16, delta conv 2)");
  ASSERT_EQ(r.model.attention.decoder_self.per_layer.size(), 4u);
  EXPECT_EQ(r.model.attention.decoder_self.per_layer[3].global, AttentionKind::gated);
  EXPECT_FALSE(r.model.attention.decoder_self.per_layer[3].erases());
  EXPECT_TRUE(r.warnings.empty());
  const Recipe back = parse_recipe(to_yaml(r), "written.yaml");
  EXPECT_EQ(first_difference(r, back), "");
  // The default is linear, so recipes written before the key mean what they meant.
  EXPECT_EQ(parse_recipe(std::string(kMinimal)).model.attention.encoder_self.global, AttentionKind::linear);
  // Only the recurrent kinds can be the global part; a feature map beside a delta global part is ignored.
  try {
    parse_recipe(std::string(kMinimal) + "model:\n  attention:\n    encoder_self: {kind: hybrid, global: softmax}\n",
                 "bad.yaml");
    ADD_FAILURE() << "global: softmax was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:5: model.attention.encoder_self.global: expected one of linear, "
                                         "delta, gated, got "),
              std::string::npos)
        << e.what();
  }
  const Recipe warned = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    encoder_self: {kind: hybrid, global: delta, feature_map: taylor}\n"
                              "    decoder_self: {kind: delta, global: gated}\n",
      "w.yaml");
  ASSERT_EQ(warned.warnings.size(), 2u);
  EXPECT_NE(warned.warnings[0].find("feature_map: ignored: global is delta"), std::string::npos) << warned.warnings[0];
  EXPECT_NE(warned.warnings[1].find("global: ignored: kind is delta"), std::string::npos) << warned.warnings[1];
}

TEST(RecipeDefaults, CustomPresetTakesEverySizeGiven) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                "model:\n  preset: custom\n  d_model: 96\n  encoder_layers: 1\n  decoder_layers: 3\n"
                                "  heads: 3\n  ffn_dim: 200\n  max_positions: 300\n");
  EXPECT_EQ(r.model.d_model, 96);
  EXPECT_EQ(r.model.heads, 3);
  EXPECT_EQ(r.model.decoder_layers, 3);
  EXPECT_EQ(r.model.max_position_embeddings, 300);
}

TEST(RecipeDefaults, EmptySectionsAreAllowed) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "optimizer:\nlogging: {}\n");
  EXPECT_EQ(r.optimizer.lr, OptimizerRecipe{}.lr);
}

TEST(RecipeDefaults, IntegersAcceptIntegralScientificNotation) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "training:\n  max_steps: 1e4\n  tokens_per_batch: +8192\n");
  EXPECT_EQ(r.training.max_steps, 10000);
  EXPECT_EQ(r.training.tokens_per_batch, 8192);
}

TEST(RecipeDefaults, TokenizerModelReplacesTraining) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "  tokenizer:\n    model: work/spm.model\n");
  EXPECT_EQ(r.data.tokenizer.model, "work/spm.model");
  EXPECT_EQ(to_yaml(r).find("vocab_size: 8000"), std::string::npos) << "train settings are not written";
}

// ------------------------------------------------------------------------------ overrides

TEST(RecipeOverrides, OverridesSetValuesOfEveryType) {
  const Recipe r = load_recipe(source_path("recipes/tiny.yaml"),
                               {"optimizer.lr=3e-4", "training.max_steps=100", "optimizer.betas=[0.8, 0.95]",
                                "checkpoints.keep_best=false", "optimizer.schedule=linear", "data.train=/tmp/x y.txt",
                                "model.attention.cross.kind=softmax", "training.device=cuda:1"});
  EXPECT_EQ(r.optimizer.lr, 3e-4);
  EXPECT_EQ(r.training.max_steps, 100);
  EXPECT_EQ(r.optimizer.betas[0], 0.8);
  EXPECT_EQ(r.optimizer.betas[1], 0.95);
  EXPECT_FALSE(r.checkpoints.keep_best);
  EXPECT_EQ(r.optimizer.schedule, "linear");
  EXPECT_EQ(r.data.train, "/tmp/x y.txt");
  EXPECT_EQ(r.model.attention.cross.kind, AttentionKind::softmax);
  EXPECT_EQ(r.training.device, "cuda:1");
  EXPECT_EQ(r.where("optimizer.lr").str(), "--set");
}

TEST(RecipeOverrides, LaterOverridesWin) {
  const Recipe r = parse_recipe(kMinimal, "r.yaml", {"optimizer.lr=1e-3", "optimizer.lr=2e-3"});
  EXPECT_EQ(r.optimizer.lr, 2e-3);
}

TEST(RecipeOverrides, PresetOverrideResizesUnlessSizesAreGiven) {
  const Recipe r = load_recipe(source_path("recipes/tiny.yaml"), {"model.preset=base", "model.heads=8"});
  EXPECT_EQ(r.model.d_model, 768);
  EXPECT_EQ(r.model.heads, 8);
}

TEST(RecipeOverrides, SectionOverrideTakesAFlowMap) {
  const Recipe r = parse_recipe(kMinimal, "r.yaml", {"training={max_steps: 700, seed: 9}"});
  EXPECT_EQ(r.training.max_steps, 700);
  EXPECT_EQ(r.training.seed, 9);
}

TEST(RecipeOverrides, OverrideSuppliesTheMissingRequiredValue) {
  const Recipe r = parse_recipe("model:\n  preset: tiny\n", "r.yaml", {"data.train=t.txt"});
  EXPECT_EQ(r.data.train, "t.txt");
}

TEST(RecipeOverrides, OverrideCanFixAFileValueBeforeCrossChecks) {
  // The file alone breaks a cross-field rule; the override repairs it, so no error.
  const std::string text = std::string(kMinimal) + "model:\n  heads: 5\n";
  EXPECT_NE(first_issue([&] { parse_recipe(text); }), "");
  EXPECT_EQ(parse_recipe(text, "r.yaml", {"model.heads=8"}).model.heads, 8);
}

TEST(RecipeOverrides, TokenizerModelOverrideWinsOverFileTrainSettings) {
  const Recipe r = load_recipe(source_path("recipes/small-linear.yaml"), {"data.tokenizer.model=work/spm.model"});
  EXPECT_EQ(r.data.tokenizer.model, "work/spm.model");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("data.tokenizer.train: ignored"), std::string::npos) << r.warnings[0];
}

TEST(RecipeOverrides, OverridesAreValidatedLikeFileValues) {
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"optimizer.lr=-1"}); }),
            "--set optimizer.lr: expected a positive number, got -1");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"model.dropout=1.5"}); }),
            "--set model.dropout: expected a number in [0, 1), got 1.5");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"optimizer.lr="}); }),
            "--set optimizer.lr: expected a positive number, got nothing");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"optimiser.lr=1"}); }),
            "--set optimiser: unknown key (did you mean optimizer?)");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"=1"}); }),
            "--set: expected key=value (e.g. optimizer.lr=3e-4), got \"=1\"");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"optimizer..lr=1"}); }),
            "--set optimizer..lr: expected a dotted key such as optimizer.lr");
  EXPECT_EQ(first_issue([] { parse_recipe(kMinimal, "r.yaml", {"optimizer=3"}); }).substr(0, 51),
            "--set optimizer: expected a map of settings (name, ");
}

// ------------------------------------------------------------------------------ many errors

TEST(RecipeErrors, EveryFieldErrorIsCollected) {
  const std::string text =
      "data:\n"                   // 1
      "  train: t.txt\n"          // 2
      "optimizer:\n"              // 3
      "  lr: fast\n"              // 4
      "  betas: [2, 0.9]\n"       // 5
      "training:\n"               // 6
      "  max_steps: -1\n"         // 7
      "  colour: never\n";        // 8
  const auto issues = config_issues([&] { parse_recipe(text, "many.yaml", {"logging.every_steps=0"}); });
  ASSERT_EQ(issues.size(), 5u) << ConfigError(issues).what();
  EXPECT_EQ(issues[0].str(), "many.yaml:4: optimizer.lr: expected a positive number, got \"fast\"");
  EXPECT_EQ(issues[1].str(), "many.yaml:5: optimizer.betas[0]: expected a number in [0, 1), got 2");
  EXPECT_EQ(issues[2].str(), "many.yaml:7: training.max_steps: expected a non-negative integer, got -1");
  EXPECT_EQ(issues[3].key, "training.colour");
  EXPECT_EQ(issues[4].str(), "--set logging.every_steps: expected a positive integer, got 0");
  try {
    parse_recipe(text, "many.yaml");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.substr(0, what.find('\n')), issues[0].str());
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
  }
}

TEST(RecipeErrors, UnreadableFileIsAConfigError) {
  EXPECT_EQ(first_issue([] { load_recipe("/nonexistent/recipe.yaml"); }),
            "/nonexistent/recipe.yaml: cannot read the file (No such file or directory)");
}

TEST(RecipeErrors, ConfigErrorIsATarnError) {
  try {
    parse_recipe("optimizer: 3\n");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(dynamic_cast<const ConfigError*>(&e), nullptr);
  }
}

// yaml-cpp 0.7's LoadAll looped forever, growing memory, on a ',' where a document starts
// (fuzz/recipe_fuzzer); the loader reports it instead, wherever the document is.
TEST(RecipeErrors, StrayCommaWhereADocumentStartsIsASyntaxErrorNotAHang) {
  const std::string expected =
      "YAML syntax error: unexpected ',' where a value should start (',' separates items only inside [ ] or { })";
  EXPECT_EQ(first_issue([] { parse_recipe(",", "c.yaml"); }), "c.yaml:1: " + expected);
  EXPECT_EQ(first_issue([] { parse_recipe("# a comment\n,\n", "c.yaml"); }), "c.yaml:2: " + expected);
  EXPECT_EQ(first_issue([] { parse_recipe("data:\n  train: t.txt\n---\n, x\n", "c.yaml"); }), "c.yaml:4: " + expected);
}

// ------------------------------------------------------------------------------ warnings

TEST(RecipeAttention, TaylorOrderAndWidthParseAndAreChecked) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n"
                                    "    cross: {kind: linear, feature_map: taylor, taylor_order: 4, taylor_dim: 8}\n",
                                "t.yaml");
  EXPECT_EQ(r.model.attention.cross.taylor_order, 4);
  EXPECT_EQ(r.model.attention.cross.taylor_dim, 8);
  EXPECT_EQ(r.model.attention.cross.feature_count(64), 495);
  EXPECT_EQ(r.model.attention.cross.str(), "linear(taylor order 4 r 8)");
  EXPECT_TRUE(r.warnings.empty());
  const Recipe back = parse_recipe(to_yaml(r), "written.yaml");
  EXPECT_EQ(first_difference(r, back), "");
  // Based's map is the default, so recipes written before the keys mean what they meant.
  const AttentionConfig based = parse_recipe(std::string(kMinimal)).model.attention.cross;
  EXPECT_EQ(based.taylor_order, 2);
  EXPECT_EQ(based.taylor_dim, 16);
  // An odd order (the kernel can turn negative) and more features than the kernels take.
  for (const auto& [setting, message] :
       {std::pair<std::string, std::string>{"taylor_order: 3", "model.attention.cross.taylor_order: expected 2 or 4"},
        {"taylor_order: 4, taylor_dim: 17",
         "model.attention.cross.taylor_dim: 17 at taylor_order 4 gives 5985 features, above the 5120"}}) {
    try {
      parse_recipe(std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: linear, feature_map: taylor, " +
                       setting + "}\n",
                   "bad.yaml");
      ADD_FAILURE() << setting << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.yaml:5: " + message), std::string::npos) << e.what();
    }
  }
  const Recipe warned = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: linear, feature_map: elu1, taylor_order: 4}\n",
      "w.yaml");
  ASSERT_EQ(warned.warnings.size(), 1u);
  EXPECT_EQ(warned.warnings[0], "w.yaml:5: model.attention.cross.taylor_order: ignored: feature_map is not taylor");
}

TEST(RecipeAttention, RoutedIsCrossAttentionsOnlyWithItsOwnKeys) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n    cross: {kind: routed, route_chunk: 8, route_top: 2}\n",
                                "t.yaml");
  const AttentionConfig& cross = r.model.attention.cross;
  EXPECT_TRUE(cross.is_routed());
  EXPECT_EQ(cross.route_chunk, 8);
  EXPECT_EQ(cross.route_top, 2);
  EXPECT_EQ(cross.str(), "routed(chunk 8, top 2)");
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(first_difference(r, parse_recipe(to_yaml(r), "written.yaml")), "");
  // A tree of landmarks above 64 of them, and one choosing 8 at each level above the chunks.
  const Recipe tree = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: routed, route_root: 64}\n", "t.yaml");
  EXPECT_EQ(tree.model.attention.cross.route_root, 64);
  EXPECT_EQ(tree.model.attention.cross.str(), "routed(chunk 16, top 4, root 64)");
  EXPECT_EQ(first_difference(tree, parse_recipe(to_yaml(tree), "written.yaml")), "");
  const Recipe beam = parse_recipe(std::string(kMinimal) +
                                       "model:\n  attention:\n    cross: {kind: routed, route_root: 64, route_beam: 8}\n",
                                   "t.yaml");
  EXPECT_EQ(beam.model.attention.cross.route_beam, 8);
  EXPECT_EQ(beam.model.attention.cross.str(), "routed(chunk 16, top 4, root 64, beam 8)");
  EXPECT_TRUE(beam.warnings.empty());
  EXPECT_EQ(first_difference(beam, parse_recipe(to_yaml(beam), "written.yaml")), "");

  // Self-attention has no source to choose chunks of; a chunk of 0 positions is no chunk, and
  // chunks of 1 never shrink to a root.
  expect_refused({
           {"    decoder_self: {kind: routed}\n", "bad.yaml:5: model.attention.decoder_self.kind: routed is cross-attention only"},
           {"    encoder_self: {layers: [linear, routed, linear, linear]}\n",
            "model.attention.encoder_self.layers[1].kind: routed is cross-attention only"},
           {"    cross: {kind: routed, route_chunk: 0}\n", "bad.yaml:5: model.attention.cross.route_chunk:"},
           {"    cross: {kind: routed, route_top: 0}\n", "bad.yaml:5: model.attention.cross.route_top:"},
           {"    cross: {kind: routed, route_root: -1}\n", "bad.yaml:5: model.attention.cross.route_root:"},
           {"    cross: {kind: routed, route_root: 8, route_beam: -1}\n", "bad.yaml:5: model.attention.cross.route_beam:"},
           {"    cross: {kind: routed, route_root: 8, route_beam: 65}\n", "bad.yaml:5: model.attention.cross.route_beam:"},
           {"    cross: {kind: routed, route_chunk: 1, route_root: 8}\n",
            "model.attention.cross.route_root: a tree of landmarks needs route_chunk of 2 or more"}});
  // Its keys are its own, and it reads no other kind's.
  const Recipe warned = parse_recipe(std::string(kMinimal) +
                                         "model:\n  attention:\n    cross: {kind: linear, route_top: 2}\n",
                                     "w.yaml");
  ASSERT_EQ(warned.warnings.size(), 1u);
  EXPECT_EQ(warned.warnings[0], "w.yaml:5: model.attention.cross.route_top: ignored: kind is linear");
  const Recipe warned_routed = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: routed, window: 8}\n", "w.yaml");
  ASSERT_EQ(warned_routed.warnings.size(), 1u);
  EXPECT_EQ(warned_routed.warnings[0], "w.yaml:5: model.attention.cross.window: ignored: kind is routed");
  // A beam needs levels above the chunks.
  const Recipe flat_beam = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: routed, route_beam: 8}\n", "w.yaml");
  ASSERT_EQ(flat_beam.warnings.size(), 1u);
  EXPECT_EQ(flat_beam.warnings[0],
            "w.yaml:5: model.attention.cross.route_beam: ignored: route_root is 0 (one level: nothing above the chunks)");
}

TEST(RecipeAttention, AlignDecayIsCrossAttentionsOnly) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n"
                                    "    cross: {kind: linear, feature_map: taylor, align_decay: 0.9}\n",
                                "t.yaml");
  const AttentionConfig& cross = r.model.attention.cross;
  EXPECT_DOUBLE_EQ(cross.align_decay, 0.9);
  EXPECT_TRUE(cross.is_aligned());
  EXPECT_EQ(cross.str(), "linear(taylor, align 0.9)");
  EXPECT_DOUBLE_EQ(cross.head_decay(0), 1.0);  // head 0 reads the whole source
  EXPECT_DOUBLE_EQ(cross.head_decay(1), 0.9);
  EXPECT_DOUBLE_EQ(cross.head_decay(2), 0.9 * 0.9);
  EXPECT_DOUBLE_EQ(cross.head_decay(3), std::pow(0.9, 4));
  EXPECT_DOUBLE_EQ(cross.head_decay(40), AttentionConfig::kMinHeadDecay);  // floored, never 0
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(first_difference(r, parse_recipe(to_yaml(r), "written.yaml")), "");
  EXPECT_FALSE(parse_recipe(std::string(kMinimal)).model.attention.cross.is_aligned());  // off by default

  // Self-attention has no second sequence to align with, in a stack or a per-layer entry; a
  // decay of 1 or more is no decay.
  expect_refused({
           {"    decoder_self: {kind: linear, align_decay: 0.9}\n",
            "bad.yaml:5: model.attention.decoder_self.align_decay: cross-attention only"},
           {"    encoder_self: {layers: [linear, {kind: linear, align_decay: 0.5}, linear, linear]}\n",
            "bad.yaml:5: model.attention.encoder_self.layers[1].align_decay: cross-attention only"},
           {"    cross: {kind: linear, align_decay: 1}\n",
            "bad.yaml:5: model.attention.cross.align_decay: expected"}});
  const Recipe warned = parse_recipe(
      std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: softmax, align_decay: 0.9}\n", "w.yaml");
  ASSERT_EQ(warned.warnings.size(), 1u);
  EXPECT_EQ(warned.warnings[0], "w.yaml:5: model.attention.cross.align_decay: ignored: kind is softmax");
}

// A per-layer entry follows the rules of a stack's settings (app/recipe/attention_recipe.cpp
// checks both with the same code), each at the entry's line: before, an entry's gate without
// its decay and its Taylor map too wide for the kernels passed the recipe and failed only when
// the model was built (BartConfig::validate), without a line.
TEST(RecipeAttention, PerLayerEntriesFollowTheStacksRules) {
  expect_refused({
           {"    cross: {layers: [linear, {kind: linear, align_gate: true}, linear, linear]}\n",
            "bad.yaml:5: model.attention.cross.layers[1].align_gate: needs align_decay > 0"},
           {"    cross: {layers: [linear, linear, linear, {kind: linear, feature_map: taylor, taylor_order: 4, "
            "taylor_dim: 17}]}\n",
            "bad.yaml:5: model.attention.cross.layers[3].taylor_dim: 17 at taylor_order 4 gives 5985 features, above "
            "the 5120"},
           {"    cross: {layers: [linear, linear, linear, {kind: hybrid, global: delta}]}\n",
            "bad.yaml:5: model.attention.cross.layers[3].global: hybrid cross-attention takes global: linear"}});
  // The stack's own gate, given beside `layers`, is its entries' default: those that set their
  // own decay take it.
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n"
                                    "    cross: {align_decay: 0.9, align_gate: true, layers: [linear, linear, linear, "
                                    "{kind: linear, align_decay: 0.5}]}\n",
                                "t.yaml");
  ASSERT_EQ(r.model.attention.cross.per_layer.size(), 4u);
  EXPECT_TRUE(r.model.attention.cross.per_layer[3].align_gate);
  EXPECT_DOUBLE_EQ(r.model.attention.cross.per_layer[3].align_decay, 0.5);
}

TEST(RecipeWarnings, IdentityFeatureMapIsAllowedWithAWarning) {
  const Recipe r = parse_recipe(std::string(kMinimal) +
                                    "model:\n  attention:\n    encoder_self: {kind: linear, feature_map: identity}\n",
                                "w.yaml");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0],
            "w.yaml:5: model.attention.encoder_self.feature_map: identity makes linear attention a mean over "
            "positions: for ablations only");
}

TEST(RecipeWarnings, LinearOnlySettingsOnASoftmaxStackWarn) {
  const Recipe r = parse_recipe(std::string(kMinimal) + "model:\n  attention:\n    cross: {kind: softmax, chunk: 8}\n",
                                "w.yaml");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "w.yaml:5: model.attention.cross.chunk: ignored: kind is softmax");
}

// ------------------------------------------------------------------------------ round trip

void expect_round_trip(const Recipe& r) {
  const std::string yaml = to_yaml(r);
  Recipe back;
  ASSERT_NO_THROW(back = parse_recipe(yaml, "resolved.yaml")) << yaml;
  EXPECT_EQ(first_difference(r, back), "") << yaml;
  EXPECT_TRUE(r == back);
  EXPECT_EQ(to_yaml(back), yaml) << "to_yaml is a fixed point";
}

TEST(RecipeRoundTrip, EveryShippedRecipeLoadsBackIdentical) {
  for (const std::string& path : yaml_files("recipes")) {
    SCOPED_TRACE(path);
    expect_round_trip(load_recipe(path));
  }
}

TEST(RecipeRoundTrip, AwkwardValuesSurvive) {
  const Recipe r = parse_recipe(
      "data:\n"
      "  train: 'my corpus/a: \"b\" #1.txt'\n"
      "  valid: 'yes'\n"
      "  test: '0.5'\n"
      "  tokenizer:\n"
      "    train: {model_prefix: \"tab\\there\\\\x\"}\n"
      "optimizer:\n"
      "  lr: 0.30000000000000004\n"
      "  eps: 1e-300\n"
      "  betas: [0.0, 0.9999999999999999]\n"
      "training:\n"
      "  seed: 9007199254740993\n"
      "  max_time_minutes: 0.1\n"
      "  device: cuda:12\n"
      "checkpoints:\n"
      "  dir: \"-runs/x\"\n"
      "logging:\n"
      "  metrics_file: \"null\"\n",
      "awkward.yaml");
  EXPECT_EQ(r.data.train, "my corpus/a: \"b\" #1.txt");
  EXPECT_EQ(r.data.tokenizer.train.model_prefix, "tab\there\\x");
  EXPECT_EQ(r.training.seed, 9007199254740993);
  expect_round_trip(r);
}

TEST(RecipeRoundTrip, TokenizerModelRecipeRoundTrips) {
  expect_round_trip(parse_recipe(std::string(kMinimal) + "  tokenizer: {model: spm.model}\n"));
}

TEST(RecipeRoundTrip, EveryLeafKeyIsWritten) {
  const std::string yaml = to_yaml(load_recipe(source_path("recipes/tiny.yaml")));
  for (const config::Field* f : recipe_schema().fields()) {
    EXPECT_NE(yaml.find(f->key + ":"), std::string::npos) << f->path;
  }
  EXPECT_NE(yaml.find("causal: true"), std::string::npos);
}

TEST(RecipeRoundTrip, ComparisonSeesEveryField) {
  const Recipe a = parse_recipe(kMinimal);
  Recipe b = a;
  b.optimizer.betas[1] = 0.5;
  EXPECT_EQ(first_difference(a, b), "optimizer.betas");
  b = a;
  b.model.attention.decoder_self.chunk = 3;
  EXPECT_EQ(first_difference(a, b), "model.attention.decoder_self.chunk");
  b = a;
  b.warnings.push_back("not part of the identity");
  EXPECT_TRUE(a == b);
}

// ------------------------------------------------------------------------------ help

TEST(RecipeHelp, DescribesEveryKeyWithDefaultAndRule) {
  const std::string help = recipe_help();
  for (const config::Field* f : recipe_schema().fields()) {
    EXPECT_FALSE(f->description.empty()) << f->path;
    EXPECT_NE(help.find(f->key + ":"), std::string::npos) << f->path;
    EXPECT_NE(help.find(f->description), std::string::npos) << f->path;
  }
  EXPECT_NE(help.find("lr: 0.0005"), std::string::npos) << help;
  EXPECT_NE(help.find("[required: a non-empty string]"), std::string::npos);
  EXPECT_NE(help.find("default from model.preset"), std::string::npos);
  EXPECT_NE(help.find("one of constant, linear, cosine, inverse_sqrt"), std::string::npos);
}

// ------------------------------------------------------------------------------ files

TEST(RecipeFiles, MissingFilesAreNamedAtTheirLine) {
  ScratchDir dir;
  const std::string train = dir.write("train.txt", "a line\n");
  const std::string recipe = dir.write("r.yaml", "data:\n  train: " + train + "\n  valid: " + dir.file("valid.txt") +
                                                     "\n  tokenizer: {model: " + dir.file("spm.model") + "}\n");
  const Recipe r = load_recipe(recipe);
  const auto issues = config_issues([&] { check_recipe_files(r); });
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].str(), recipe + ":3: data.valid: expected an existing file, got \"" + dir.file("valid.txt") + "\"");
  EXPECT_EQ(issues[1].key, "data.tokenizer.model");
  EXPECT_EQ(issues[1].origin.line, 4);

  dir.write("valid.txt", "x\n");
  dir.write("spm.model", "x");
  EXPECT_NO_THROW(check_recipe_files(r));
}

TEST(RecipeFiles, RelativePathsAreRelativeToTheWorkingDirectory) {
  const Recipe r = parse_recipe("data:\n  train: surely/not/here.txt\n", "rel.yaml");
  const std::string message = first_issue([&] { check_recipe_files(r); });
  EXPECT_NE(message.find("rel.yaml:2: data.train: expected an existing file, got \"surely/not/here.txt\" (relative "
                         "to the working directory "),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace tarn

namespace tarn {
namespace {

// The message of the ConfigError that loading `path` throws, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    load_recipe(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RecipeFile, FifosDevicesFoldersAndHugeFilesAreRefusedWithoutReadingThem) {
  const testing::ScratchDir dir;
  const std::string fifo = dir.file("recipe.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO with no writer blocks forever: the refusal must come from a stat alone.
  EXPECT_NE(load_error(fifo).find(fifo + ": is not a regular file (a FIFO, socket or device)"), std::string::npos)
      << load_error(fifo);
  EXPECT_NE(load_error("/dev/zero").find("/dev/zero: is not a regular file"), std::string::npos);
  EXPECT_NE(load_error(dir.file("")).find("is a directory, not a recipe file"), std::string::npos);
  const std::string huge = dir.write("huge.yaml", "# " + std::string(config::Loader::kMaxRecipeBytes, 'x') + "\n");
  EXPECT_NE(load_error(huge).find("recipes are kilobytes, and files over 1048576 bytes are refused"), std::string::npos)
      << load_error(huge);
  // Just under the bound loads (a comment and the one required key).
  const std::string big = dir.write("big.yaml", "# " + std::string(config::Loader::kMaxRecipeBytes - 200, 'x') +
                                                    "\ndata:\n  train: t.txt\n");
  EXPECT_EQ(load_error(big).find("kilobytes"), std::string::npos) << load_error(big);
}

TEST(RecipeFile, ThreadsAreBounded) {
  const std::string recipe = testing::source_path("recipes/tiny.yaml");
  EXPECT_NO_THROW(load_recipe(recipe, {"training.threads=1024"}));
  try {
    load_recipe(recipe, {"training.threads=100000"});
    ADD_FAILURE() << "100000 threads were accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("training.threads: expected an integer in [0, 1024], got 100000"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tarn
