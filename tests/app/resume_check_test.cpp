// Resuming checks the model, not only its tensors (app/resume_check.h): every key of the
// recipe schema's model section is compared, and a change is refused unless the key is one of
// the few that may change; training settings may change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "app/recipe/recipe.h"
#include "app/resume_check.h"
#include "app/trainer.h"
#include "data/tokenizer.h"
#include "framework/config/schema.h"
#include "framework/config/yaml_scalar.h"
#include "framework/io/checkpoint_dir.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {
using config::Field;
using config::FieldType;

constexpr int64_t kTokenizerVocab = 128;  // recipes/tiny.yaml's

Recipe tiny(const std::vector<std::string>& overrides = {}) { return load_recipe(testing::tiny_recipe(), overrides); }

std::vector<std::string> keys(const std::vector<SettingChange>& changes) {
  std::vector<std::string> out;
  for (const SettingChange& c : changes) out.push_back(c.key);
  return out;
}

// The changes of `overrides` applied over `base` (both over recipes/tiny.yaml).
ResumeComparison change(const std::vector<std::string>& base, std::vector<std::string> overrides) {
  std::vector<std::string> changed = base;
  changed.insert(changed.end(), overrides.begin(), overrides.end());
  return compare_for_resume(tiny(base), tiny(changed), kTokenizerVocab);
}

// Expects exactly `refused` (key, checkpoint value, recipe value) to be refused.
void expect_refused(const ResumeComparison& c, const std::vector<SettingChange>& refused) {
  ASSERT_EQ(keys(c.refused), keys(refused));
  for (size_t i = 0; i < refused.size(); ++i) {
    EXPECT_EQ(c.refused[i].checkpoint, refused[i].checkpoint) << refused[i].key;
    EXPECT_EQ(c.refused[i].recipe, refused[i].recipe) << refused[i].key;
  }
}

// --set values that change field `f` of `base`, to try in turn: the first that gives a valid
// recipe is the change. Every field type the schema has gets some, so a key added later is
// tried without being named here.
std::vector<std::string> candidate_values(const Field& f, const Recipe& base) {
  const void* p = f.locate(const_cast<Recipe*>(&base));
  switch (f.type) {
    case FieldType::boolean: return {*static_cast<const bool*>(p) ? "false" : "true"};
    case FieldType::integer: {
      const int64_t v = *static_cast<const int64_t*>(p);
      std::vector<std::string> out;
      for (int64_t c : {v + 1, 2 * v, v - 1, v / 2, int64_t{4}, int64_t{256}, int64_t{1024}})
        if (c != v) out.push_back(std::to_string(c));
      return out;
    }
    case FieldType::number: {
      const double v = *static_cast<const double*>(p);
      std::vector<std::string> out;
      for (double c : {v / 2, (v + 1) / 2, 2 * v, 0.5, 0.25})
        if (c != v) out.push_back(config::format_number(c));
      return out;
    }
    case FieldType::choice: {
      std::vector<std::string> out;
      for (const std::string& c : f.choices)
        if (c != f.chosen(p)) out.push_back(c);
      return out;
    }
    case FieldType::string: return {*static_cast<const std::string*>(p) + "x"};
    case FieldType::numbers: {
      std::string list = "[";
      for (size_t i = 0; i < f.count; ++i) {
        const double v = static_cast<const double*>(p)[i];
        list += (i ? ", " : "") + config::format_number(i == 0 ? v / 2 : v);
      }
      return {list + "]"};
    }
    case FieldType::entries: {  // one entry per layer, whatever the count
      std::vector<std::string> out;
      for (const char* kind : {"softmax", "gated"}) {
        std::string list;
        for (int n = 1; n <= 8; ++n) {
          list += std::string(n > 1 ? ", " : "") + kind;
          out.push_back("[" + list + "]");
        }
      }
      return out;
    }
    case FieldType::fixed:
    case FieldType::section: return {};
  }
  return {};
}

TEST(ResumeCheck, EveryKeyOfTheModelSectionIsRefusedUnlessListedAsOneThatMayChange) {
  const Recipe base = tiny();
  const config::Schema& schema = recipe_schema();
  std::vector<std::string> refused, allowed, unchangeable;
  for (const Field* f : schema.fields()) {
    if (f->path.rfind("model.", 0) != 0 || !f->is_leaf() || f->type == FieldType::fixed) continue;
    std::optional<Recipe> changed;
    std::string value;
    for (const std::string& v : candidate_values(*f, base)) {
      try {
        Recipe r = tiny({f->path + "=" + v});
        if (config::Schema::value_text(*f, &r) == config::Schema::value_text(*f, &base)) continue;
        changed = std::move(r);
        value = v;
        break;
      } catch (const ConfigError&) {
      }
    }
    if (!changed) {
      unchangeable.push_back(f->path);
      continue;
    }
    const ResumeComparison c = compare_for_resume(base, *changed, kTokenizerVocab);
    // A per-layer list is reported by layer: model.attention.cross.layers[0].kind.
    auto names = [&](const std::vector<SettingChange>& list) {
      return std::any_of(list.begin(), list.end(), [&](const SettingChange& s) {
        return s.key == f->path || s.key.rfind(f->path + "[", 0) == 0;
      });
    };
    if (model_key_may_change(f->path)) {
      allowed.push_back(f->path);
      EXPECT_FALSE(names(c.refused)) << f->path << "=" << value << " may change on resume";
      EXPECT_TRUE(names(c.allowed)) << f->path << "=" << value << " is not reported as a change";
    } else {
      refused.push_back(f->path);
      EXPECT_TRUE(names(c.refused)) << f->path << "=" << value << " changes the model and was not refused";
    }
  }
  // Self-attention has no aligned decay: 0 is its only valid value, so align_gate (which gates
  // the decayed read) cannot be set there; nor in tiny's cross-attention, which has no decay.
  EXPECT_EQ(unchangeable, (std::vector<std::string>{
                              "model.attention.encoder_self.align_decay", "model.attention.encoder_self.align_gate",
                              "model.attention.encoder_self.align_gate_bias",
                              "model.attention.decoder_self.align_decay", "model.attention.decoder_self.align_gate",
                              "model.attention.decoder_self.align_gate_bias", "model.attention.cross.align_gate",
                              "model.attention.cross.align_gate_bias"}));
  EXPECT_EQ(allowed, (std::vector<std::string>{"model.preset", "model.dropout", "model.attention_dropout",
                                               "model.activation_dropout", "model.init_from", "model.init_std",
                                               "model.attention.encoder_self.chunk",
                                               "model.attention.decoder_self.chunk", "model.attention.cross.chunk"}));
  EXPECT_GE(refused.size(), 40u) << "the model section has fewer keys than expected";
}

TEST(ResumeCheck, TheSelfAttentionKindOfAWholeStackIsRefused) {
  const std::vector<std::string> delta = {"model.attention.encoder_self.kind=delta",
                                          "model.attention.decoder_self.kind=delta"};
  expect_refused(change(delta, {"model.attention.encoder_self.kind=gated"}),
                 {{"model.attention.encoder_self.kind", "delta", "gated"}});
  expect_refused(change(delta, {"model.attention.encoder_self.kind=gated", "model.attention.decoder_self.kind=linear"}),
                 {{"model.attention.encoder_self.kind", "delta", "gated"},
                  {"model.attention.decoder_self.kind", "delta", "linear"}});
}

TEST(ResumeCheck, OneEntryOfAPerLayerListIsRefusedNamingTheLayer) {
  const std::string key = "model.attention.encoder_self";
  expect_refused(change({key + "={layers: [delta, delta]}"}, {key + "={layers: [delta, gated]}"}),
                 {{key + ".layers[1].kind", "delta", "gated"}});
  // A setting given beside `layers` applies to every entry that does not set it.
  expect_refused(change({key + "={layers: [delta, {kind: hybrid, global: delta}], conv_size: 4}"},
                        {key + "={layers: [delta, {kind: hybrid, global: delta}], conv_size: 2}"}),
                 {{key + ".layers[0].conv_size", "4", "2"}, {key + ".layers[1].conv_size", "4", "2"}});
  expect_refused(change({key + "={layers: [linear, {kind: hybrid, window: 4}]}"},
                        {key + "={layers: [linear, {kind: hybrid, window: 8}]}"}),
                 {{key + ".layers[1].window", "4", "8"}});
  // The same attention written per layer or for the whole stack is the same model, either way.
  expect_refused(change({key + ".kind=delta"}, {key + "={layers: [delta, delta]}"}), {});
  expect_refused(change({key + "={layers: [delta, {kind: delta}]}"}, {key + ".kind=delta", key + ".layers=[]"}), {});
  expect_refused(change({key + ".kind=delta"}, {key + "={layers: [delta, gated]}"}),
                 {{key + ".layers[1].kind", "delta", "gated"}});
  // The cross-attention's list too.
  expect_refused(change({"model.attention.cross={layers: [linear, linear]}"},
                        {"model.attention.cross={layers: [linear, softmax]}"}),
                 {{"model.attention.cross.layers[1].kind", "linear", "softmax"}});
}

TEST(ResumeCheck, TheAlignedDecayOfCrossAttentionIsRefused) {
  const std::vector<std::string> aligned = {"model.attention.cross.feature_map=taylor",
                                            "model.attention.cross.align_decay=0.9"};
  expect_refused(change(aligned, {"model.attention.cross.align_decay=0"}),
                 {{"model.attention.cross.align_decay", "0.9", "0.0"}});
  expect_refused(change(aligned, {"model.attention.cross.align_decay=0.5"}),
                 {{"model.attention.cross.align_decay", "0.9", "0.5"}});
}

TEST(ResumeCheck, TheTaylorMapsOrderAndWidthAreRefused) {
  const std::vector<std::string> taylor = {"model.attention.cross.feature_map=taylor"};
  expect_refused(change(taylor, {"model.attention.cross.taylor_order=4", "model.attention.cross.taylor_dim=8"}),
                 {{"model.attention.cross.taylor_order", "2", "4"}, {"model.attention.cross.taylor_dim", "16", "8"}});
}

TEST(ResumeCheck, TheFeatureMapAndItsParametersAreRefused) {
  const std::string k = "model.attention.encoder_self";
  expect_refused(change({}, {k + ".feature_map=relu"}), {{k + ".feature_map", "elu1", "relu"}});
  expect_refused(change({k + ".eps=1e-6"}, {k + ".eps=1e-3"}), {{k + ".eps", "1e-6", "0.001"}});
  const std::vector<std::string> favor = {k + ".feature_map=favor", k + ".favor_features=16"};
  expect_refused(change(favor, {k + ".favor_features=32", k + ".favor_redraw_every=10"}),
                 {{k + ".favor_features", "16", "32"}, {k + ".favor_redraw_every", "0", "10"}});
  const std::vector<std::string> hedgehog = {k + ".feature_map=hedgehog"};
  expect_refused(change(hedgehog, {k + ".feature_map=taylor"}), {{k + ".feature_map", "hedgehog", "taylor"}});
}

TEST(ResumeCheck, SizesAreRefusedAndAVocabularyOfZeroIsTheTokenizers) {
  expect_refused(change({}, {"model.d_model=128", "model.heads=8", "model.ffn_dim=512", "model.max_positions=256",
                             "model.encoder_layers=3", "model.decoder_layers=1", "model.vocab_size=256",
                             "model.scale_embedding=true"}),
                 {{"model.vocab_size", "128", "256"},
                  {"model.d_model", "64", "128"},
                  {"model.encoder_layers", "2", "3"},
                  {"model.decoder_layers", "2", "1"},
                  {"model.heads", "4", "8"},
                  {"model.ffn_dim", "256", "512"},
                  {"model.max_positions", "128", "256"},
                  {"model.scale_embedding", "false", "true"}});
  // 0 is the tokenizer's size: the same model as the size written out.
  expect_refused(change({}, {"model.vocab_size=128"}), {});
  // A preset is the sizes it names: another preset with the same sizes is the same model.
  const ResumeComparison same = change({}, {"model.preset=small", "model.d_model=64", "model.encoder_layers=2",
                                            "model.decoder_layers=2", "model.ffn_dim=256", "model.max_positions=128"});
  expect_refused(same, {});
  EXPECT_EQ(keys(same.allowed), std::vector<std::string>{"model.preset"});
  expect_refused(change({}, {"model.preset=small"}),
                 {{"model.d_model", "64", "256"},
                  {"model.encoder_layers", "2", "4"},
                  {"model.decoder_layers", "2", "4"},
                  {"model.ffn_dim", "256", "1024"},
                  {"model.max_positions", "128", "512"}});
}

TEST(ResumeCheck, TheDeltaRulesConvolutionIsRefused) {
  const std::vector<std::string> delta = {"model.attention.decoder_self.kind=delta"};
  expect_refused(change(delta, {"model.attention.decoder_self.conv_size=1"}),
                 {{"model.attention.decoder_self.conv_size", "4", "1"}});
}

TEST(ResumeCheck, AHybridsWindowAndGlobalPartAreRefused) {
  const std::string k = "model.attention.decoder_self";
  const std::vector<std::string> hybrid = {k + ".kind=hybrid", k + ".window=8"};
  expect_refused(change(hybrid, {k + ".window=16", k + ".global=delta"}),
                 {{k + ".window", "8", "16"}, {k + ".global", "linear", "delta"}});
  expect_refused(change(hybrid, {k + ".kind=linear"}), {{k + ".kind", "hybrid", "linear"}});
}

TEST(ResumeCheck, TrainingSettingsAndTheListedModelKeysMayChange) {
  const ResumeComparison c =
      change({}, {"optimizer.lr=3e-4", "optimizer.schedule=inverse_sqrt", "training.tokens_per_batch=512",
                  "training.max_steps=7", "training.precision=bf16", "training.seed=5", "training.threads=1",
                  "training.grad_accumulation=2", "validation.every_steps=3", "checkpoints.every_steps=4",
                  "logging.every_steps=1", "data.train=elsewhere/train.txt", "data.max_source_len=32",
                  "model.dropout=0.2", "model.attention_dropout=0.1", "model.activation_dropout=0.1",
                  "model.init_std=0.05", "model.attention.decoder_self.chunk=32", "model.attention.cross.chunk=8"});
  EXPECT_TRUE(c.refused.empty()) << keys(c.refused).front();
  EXPECT_EQ(keys(c.allowed),
            (std::vector<std::string>{"model.dropout", "model.attention_dropout", "model.activation_dropout",
                                      "model.init_std", "model.attention.decoder_self.chunk",
                                      "model.attention.cross.chunk", "data.train",
                                      "data.tokenizer.train.model_prefix",  // derived from data.train
                                      "data.max_source_len",
                                      "optimizer.lr", "optimizer.schedule", "training.tokens_per_batch",
                                      "training.grad_accumulation", "training.max_steps", "training.seed",
                                      "training.precision", "training.threads", "validation.every_steps",
                                      "checkpoints.every_steps", "logging.every_steps"}));
  EXPECT_TRUE(model_key_may_change("model.attention.encoder_self.layers[1].chunk"));
  EXPECT_FALSE(model_key_may_change("model.attention.encoder_self.layers[1].kind"));
}

// A checkpoint's recipe.yaml holds the keys its tarn had. Written before a key existed, it
// takes that key's default, which is what that run computed: it resumes under a recipe that
// leaves the key at its default.
TEST(ResumeCheck, ACheckpointRecipeWrittenBeforeNewerKeysStillResumes) {
  const Recipe now = tiny({"model.attention.encoder_self.kind=delta", "model.attention.cross.feature_map=taylor",
                           "model.attention.cross.align_decay=0.9"});
  std::istringstream in(to_yaml(now));
  std::string old_yaml;
  int dropped = 0;
  for (std::string line; std::getline(in, line);) {
    bool newer = false;
    for (const char* key : {"conv_size:", "window:", "global:", "taylor_order:", "taylor_dim:", "layers:",
                            "tensorboard:", "favor_redraw_every:", "check_replicas_every_steps:", "pack_tokens:"})
      newer = newer || line.find(std::string(" ") + key) != std::string::npos;
    dropped += newer;
    if (!newer) old_yaml += line + "\n";
  }
  EXPECT_GT(dropped, 20);
  const Recipe old = parse_recipe(old_yaml, "runs/x/step_00000010/recipe.yaml");
  const ResumeComparison c = compare_for_resume(old, now, kTokenizerVocab);
  EXPECT_TRUE(c.refused.empty()) << keys(c.refused).front();
}

// ------------------------------------------------------------------------ through the trainer

TrainOptions options(const std::string& dir, int64_t steps, std::vector<std::string> extra) {
  TrainOptions o;
  o.recipe_path = testing::tiny_recipe();
  o.overrides = testing::tiny_overrides(dir, steps);
  o.overrides.insert(o.overrides.end(), {"validation.every_steps=0", "checkpoints.every_steps=0"});
  o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
  return o;
}

std::string refusal(const TrainOptions& o) {
  try {
    train(o);
  } catch (const ConfigError& e) {  // exit 2 in the CLI
    return e.what();
  }
  return "(resumed)";
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in:\n" << text;
}

TEST(ResumeCheck, TrainRefusesAChangedModelListingEachKeyAndResumesWithChangedTrainingSettings) {
  const std::string dir = testing::make_tiny_corpus("resume_check");
  const std::vector<std::string> model = {"model.attention.encoder_self.kind=delta",
                                          "model.attention.cross.feature_map=taylor",
                                          "model.attention.cross.align_decay=0.9"};
  EXPECT_EQ(train(options(dir, 2, model)).steps, 2);

  std::vector<std::string> changed = model;
  changed.insert(changed.end(), {"model.attention.encoder_self.kind=gated", "model.attention.cross.align_decay=0.5",
                                 "model.attention.cross.taylor_order=4", "model.dropout=0.2"});
  const std::string why = refusal(options(dir, 4, changed));
  expect_has(why, "--set model.attention.encoder_self.kind: the checkpoint's model has delta, this recipe gives gated");
  expect_has(why, "model.attention.cross.align_decay: the checkpoint's model has 0.9, this recipe gives 0.5");
  expect_has(why, "model.attention.cross.taylor_order: the checkpoint's model has 2, this recipe gives 4");
  EXPECT_EQ(why.find("model.dropout"), std::string::npos) << why;
  expect_has(why, checkpoint_dir(dir + "/run", 2) + ": resuming from it would go on training a different model");
  expect_has(why, "--restart");
  expect_has(why, "another checkpoints.dir");
  ASSERT_EQ(list_checkpoints(dir + "/run").size(), 1u) << "a refused resume wrote a checkpoint";

  // Another tokenizer: the ids would mean other pieces.
  TokenizerTrainOptions chars;
  chars.model_type = "char";
  chars.hard_vocab_limit = false;
  const std::string other = Tokenizer::train({dir + "/train.txt"}, dir + "/other_spm", 64, chars);
  TrainOptions retokenized = options(dir, 4, model);
  retokenized.overrides.erase(std::remove_if(retokenized.overrides.begin(), retokenized.overrides.end(),
                                             [](const std::string& s) { return s.rfind("data.tokenizer", 0) == 0; }),
                              retokenized.overrides.end());
  retokenized.overrides.push_back("data.tokenizer.model=" + other);
  const std::string tokenizer_why = refusal(retokenized);
  expect_has(tokenizer_why, "--set data.tokenizer.model: the tokenizer " + other + " is not the checkpoint's");
  expect_has(tokenizer_why, "--set data.tokenizer.model=" + checkpoint_dir(dir + "/run", 2) + "/tokenizer.model");

  // How to train, not what: resumed.
  std::vector<std::string> training = model;
  training.insert(training.end(), {"optimizer.lr=5e-4", "training.tokens_per_batch=512", "training.precision=bf16",
                                   "model.dropout=0.2", "model.attention.decoder_self.chunk=8"});
  const TrainSummary resumed = train(options(dir, 3, training));
  EXPECT_EQ(resumed.steps, 3);
  EXPECT_EQ(resumed.steps_this_run, 1);
}

}  // namespace
}  // namespace tarn::app
