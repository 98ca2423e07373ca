// End to end through the trainer as `tarn train` runs it: loss falls, resume is bit-exact,
// validation and checkpoints appear where the recipe says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <filesystem>

#include "framework/allocator.h"
#include "framework/io/checkpoint_dir.h"
#include "framework/config/config_error.h"
#include "framework/io/safetensors.h"
#include "layers/bart.h"
#include "app/session.h"
#include "kernels/backend.h"
#include "tests/app/app_test_util.h"
#include "app/checkpoint_state.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {
using testing::make_tiny_corpus;
using testing::tiny_overrides;
using testing::tiny_recipe;

TrainOptions options(const std::string& dir, int64_t steps, std::vector<std::string> extra = {}) {
  TrainOptions o;
  o.recipe_path = tiny_recipe();
  o.overrides = tiny_overrides(dir, steps);
  o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
  return o;
}

TEST(Train, TinyRecipeTrainsEndToEndAndLossFalls) {
  const std::string dir = make_tiny_corpus("loss_falls");
  const TrainSummary first = train(options(dir, 5, {"validation.every_steps=0"}));
  ASSERT_TRUE(first.valid.has_value());
  const double nll_early = first.valid->mean_nll();
  const TrainSummary later = train(options(dir, 60, {"validation.every_steps=0"}));  // resumes at 5
  EXPECT_EQ(later.steps, 60);
  EXPECT_EQ(later.steps_this_run, 55);
  ASSERT_TRUE(later.valid.has_value());
  EXPECT_LT(later.valid->mean_nll(), nll_early - 0.5) << "validation NLL did not fall enough";
  EXPECT_FALSE(later.failed);
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/metrics.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/step_60/COMPLETE"));
}

// Returns the folder of the run that went through in one go.
std::string expect_resume_bit_exact(const std::string& name, std::vector<std::string> extra) {
  const std::string a = make_tiny_corpus(name + "_a"), b = make_tiny_corpus(name + "_b");
  extra.insert(extra.end(), {"validation.every_steps=4", "checkpoints.every_steps=0", "model.dropout=0.1"});
  train(options(a, 12, extra));           // 12 steps in one run
  train(options(b, 7, extra));            // 7 steps, stop, ...
  const TrainSummary r = train(options(b, 12, extra));  // ... resume for 5 more
  EXPECT_EQ(r.steps_this_run, 5);
  const std::vector<float> sa = testing::final_state(a + "/run", 12), sb = testing::final_state(b + "/run", 12);
  EXPECT_EQ(sa.size(), sb.size());
  if (sa.size() != sb.size()) return a;
  size_t differ = 0;
  for (size_t i = 0; i < sa.size(); ++i) differ += std::memcmp(&sa[i], &sb[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "of " << sa.size() << " values";
  const Progress pa = checkpoint_progress(open_checkpoint(checkpoint_dir(a + "/run", 12)));
  const Progress pb = checkpoint_progress(open_checkpoint(checkpoint_dir(b + "/run", 12)));
  EXPECT_EQ(pa.data, pb.data);
  EXPECT_EQ(pa.dropout.counter, pb.dropout.counter);
  EXPECT_EQ(pa.tokens_seen, pb.tokens_seen);
  return a;
}

TEST(Train, ResumeIsBitExact) { expect_resume_bit_exact("resume", {}); }

TEST(Train, ResumeIsBitExactWithFavorProjectionsRedrawnDuringTraining) {
  std::vector<std::string> favor;
  for (const char* stack : {"encoder_self", "decoder_self", "cross"}) {
    const std::string k = std::string("model.attention.") + stack;
    favor.insert(favor.end(), {k + ".feature_map=favor", k + ".favor_features=16", k + ".favor_redraw_every=3"});
  }
  expect_resume_bit_exact("resume_favor", favor);
}

std::vector<std::string> every_stack(const char* kind) {
  std::vector<std::string> o;
  for (const char* stack : {"encoder_self", "decoder_self", "cross"})
    o.push_back(std::string("model.attention.") + stack + ".kind=" + kind);
  return o;
}

TEST(Train, DeltaAndGatedAttentionTrainEndToEndAndLossFalls) {
  for (const char* kind : {"delta", "gated"}) {
    const std::string dir = make_tiny_corpus(std::string("loss_falls_") + kind);
    std::vector<std::string> extra = every_stack(kind);
    extra.push_back("validation.every_steps=0");
    const TrainSummary first = train(options(dir, 5, extra));
    ASSERT_TRUE(first.valid.has_value());
    const TrainSummary later = train(options(dir, 30, extra));
    ASSERT_TRUE(later.valid.has_value());
    EXPECT_LT(later.valid->mean_nll(), first.valid->mean_nll() - 0.5) << kind << ": validation NLL did not fall enough";
    EXPECT_FALSE(later.failed) << kind;
  }
}

TEST(Train, ResumeIsBitExactWithDeltaAttention) { expect_resume_bit_exact("resume_delta", every_stack("delta")); }

TEST(Train, ResumeIsBitExactWithAttentionChosenPerLayerWhichTheCheckpointKeeps) {
  const std::vector<std::string> per_layer = {"model.attention.encoder_self={layers: [linear, {kind: hybrid, window: 4}]}",
                                              "model.attention.decoder_self={layers: [hybrid, softmax], window: 3}"};
  const std::string dir = expect_resume_bit_exact("resume_per_layer", per_layer);
  const Recipe r = checkpoint_recipe(open_checkpoint(checkpoint_dir(dir + "/run", 12)));
  ASSERT_EQ(r.model.attention.encoder_self.per_layer.size(), 2u);
  EXPECT_EQ(r.model.attention.encoder_self.per_layer[0].kind, AttentionKind::linear);
  EXPECT_EQ(r.model.attention.encoder_self.per_layer[1].kind, AttentionKind::hybrid);
  EXPECT_EQ(r.model.attention.encoder_self.per_layer[1].window, 4);
  ASSERT_EQ(r.model.attention.decoder_self.per_layer.size(), 2u);
  EXPECT_EQ(r.model.attention.decoder_self.per_layer[0].window, 3);  // given beside `layers`
  EXPECT_EQ(r.model.attention.decoder_self.per_layer[1].kind, AttentionKind::softmax);
}

TEST(Train, KeepsTheLastCheckpointsAndTheBest) {
  const std::string dir = make_tiny_corpus("keep");
  train(options(dir, 12, {"checkpoints.every_steps=3", "checkpoints.keep_last=2", "validation.every_steps=3"}));
  const auto list = list_checkpoints(dir + "/run");
  ASSERT_GE(list.size(), 2u);
  EXPECT_EQ(list.back().step, 12);
  EXPECT_TRUE(best_checkpoint_step(dir + "/run").has_value());
  EXPECT_LE(list.size(), 3u);  // the last two, and the best if it is older
}

TEST(Train, RestartSetsThePreviousRunAsideSoResumeCannotPickItUp) {
  const std::string dir = make_tiny_corpus("restart");
  train(options(dir, 6, {"validation.every_steps=0"}));
  TrainOptions again = options(dir, 2, {"validation.every_steps=0"});
  again.restart = true;
  EXPECT_EQ(train(again).steps, 2);
  const auto list = list_checkpoints(dir + "/run");
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list.back().step, 2) << "the old step_6 is still where a resume would find it";
  bool kept = false;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/run"))
    kept = kept || (e.path().filename().string().rfind("previous_", 0) == 0 &&
                    std::filesystem::exists(e.path() / "step_6" / "COMPLETE"));
  EXPECT_TRUE(kept) << "the previous run's checkpoint was not kept aside";
}

TEST(Train, RestartsWithinOneSecondSetAsideUnderUniqueNames) {
  const std::string dir = make_tiny_corpus("restart_twice");
  train(options(dir, 2, {"validation.every_steps=0"}));
  // The names a restart in the next seconds would take are already there.
  const long long now = static_cast<long long>(std::time(nullptr));
  for (long long t = now; t < now + 30; ++t) std::filesystem::create_directories(dir + "/run/previous_" + std::to_string(t));
  TrainOptions again = options(dir, 2, {"validation.every_steps=0"});
  again.restart = true;
  EXPECT_EQ(train(again).steps, 2);
  EXPECT_EQ(train(again).steps, 2);
  int kept = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/run"))
    kept += e.path().filename().string().rfind("previous_", 0) == 0 && std::filesystem::exists(e.path() / "step_2");
  EXPECT_EQ(kept, 2) << "each restart keeps the run before it, under a name of its own";
}

TEST(Train, AFolderThatCannotBeCreatedIsAConfigErrorNamingTheKey) {
  const std::string dir = make_tiny_corpus("bad_checkpoints_dir");
  try {
    train(options(dir, 2, {"checkpoints.dir=/proc/tarn_cannot/run"}));
    ADD_FAILURE() << "training into /proc did not fail";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoints.dir: cannot create the folder /proc/tarn_cannot/run"),
              std::string::npos)
        << e.what();
  }
  try {
    train(options(dir, 2, {"data.tokenizer.train.model_prefix=/proc/tarn_cannot/spm"}));
    ADD_FAILURE() << "a tokenizer into /proc did not fail";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "data.tokenizer.train.model_prefix: cannot create the folder /proc/tarn_cannot"),
              std::string::npos)
        << e.what();
  }
}

TEST(Train, TheTokenizerFolderIsCreated) {
  const std::string dir = make_tiny_corpus("tokenizer_folder");
  train(options(dir, 1, {"data.tokenizer.train.model_prefix=" + dir + "/new/folder/spm", "validation.every_steps=0"}));
  EXPECT_TRUE(std::filesystem::exists(dir + "/new/folder/spm.model"));
}

TEST(Train, ADivergingRunStopsLikeANonFiniteOneAndItsMetricsStayValidJson) {
  // A learning rate of 10 sends the loss past 700 nats per token (perplexity overflows a
  // double) within a few steps while it is still finite.
  const std::string dir = make_tiny_corpus("diverging");
  const TrainSummary r = train(options(dir, 60, {"optimizer.lr=10", "optimizer.schedule=constant",
                                                 "training.max_bad_steps=3", "validation.every_steps=0",
                                                 "logging.every_steps=1"}));
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.stop_reason, "non-finite");
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    ++lines;
    EXPECT_EQ(line.find("inf"), std::string::npos) << line;
    EXPECT_EQ(line.find("nan"), std::string::npos) << line;
  }
  EXPECT_GT(lines, 0);
}

// A copy of checkpoint `from` as `to` with file `name` replaced by `bytes`, written through the
// checkpoint writer: every checksum is valid, so only loading can find what is wrong.
void rewrite_checkpoint(const std::string& from, const std::string& to, const std::string& name,
                        const std::string& bytes) {
  const Checkpoint c = open_checkpoint(from);
  CheckpointWriter w(to);
  for (const CheckpointFile& f : c.files) w.write_file(f.name, f.name == name ? bytes : read_file(c.path(f.name)));
  w.commit();
}

std::string model_with_a_nan(const std::string& checkpoint) {
  SafetensorsFile f = load_safetensors(checkpoint + "/model.safetensors");
  Tensor t = f.tensors.back().second.clone();
  t.f32()[t.numel() / 2] = std::nanf("");
  f.tensors.back().second = t;
  const std::string tmp = checkpoint + ".nan.safetensors";
  save_safetensors(tmp, f.tensors, f.metadata);
  std::string bytes = read_file(tmp);
  std::filesystem::remove(tmp);
  return bytes;
}

TEST(Train, ANewestCheckpointThatPassesItsChecksumsButDoesNotLoadIsSkippedForTheNewestThatDoes) {
  const std::string dir = make_tiny_corpus("fallback");
  train(options(dir, 4, {"validation.every_steps=0", "checkpoints.every_steps=2", "checkpoints.keep_last=0"}));
  const std::string run = dir + "/run", step4 = checkpoint_dir(run, 4);
  const std::string optimizer = read_file(step4 + "/optimizer.safetensors");
  const std::vector<std::pair<std::string, std::string>> damage = {
      {"progress.json", "{\"step\": "},                                // unparsable
      {"optimizer.safetensors", optimizer.substr(0, optimizer.size() / 2)},  // truncated
      {"model.safetensors", model_with_a_nan(step4)},                   // diverged weights
  };
  for (const auto& [file, bytes] : damage) {
    std::filesystem::remove_all(checkpoint_dir(run, 6));
    std::filesystem::remove_all(checkpoint_dir(run, 5));
    rewrite_checkpoint(step4, checkpoint_dir(run, 6), file, bytes);
    ASSERT_TRUE(open_checkpoint(checkpoint_dir(run, 6)).files.size() > 0) << "the checksums must pass";
    const TrainSummary r =
        train(options(dir, 5, {"validation.every_steps=0", "checkpoints.every_steps=0", "checkpoints.keep_last=0"}));
    EXPECT_EQ(r.steps, 5) << file;
    EXPECT_EQ(r.steps_this_run, 1) << "resumed from step_4, past the damaged step_6 (" << file << ")";
  }
  // Weights that are not finite are refused by name wherever a checkpoint is loaded.
  try {
    const Tokenizer tok = Tokenizer::load(dir + "/spm.model");
    BartForConditionalGeneration model(
        model_config(checkpoint_recipe(open_checkpoint(checkpoint_dir(run, 6))), tok.vocab_size()));
    load_model_weights(open_checkpoint(checkpoint_dir(run, 6)), model);
    ADD_FAILURE() << "NaN weights were loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a non-finite value"), std::string::npos) << e.what();
  }
  // When no checkpoint loads, the run stops rather than start over on top of a half-loaded one.
  for (int64_t step : {2, 4, 5}) std::filesystem::remove_all(checkpoint_dir(run, step));
  EXPECT_THROW(train(options(dir, 8, {"validation.every_steps=0"})), Error);
}

TEST(Train, CudaDeviceWithoutAGpuIsAConfigErrorSayingSo) {
  if (kernels::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string dir = make_tiny_corpus("no_cuda_device");
  try {
    train(options(dir, 2, {"training.device=cuda"}));
    ADD_FAILURE() << "training on cuda without a device did not fail";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("training.device"), std::string::npos) << e.what();
  }
}

TEST(Train, BadRecipeValueIsAConfigErrorBeforeAnyWork) {
  const std::string dir = make_tiny_corpus("bad");
  EXPECT_THROW(train(options(dir, 5, {"optimizer.lr=-1"})), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/run"));
  EXPECT_THROW(train(options(dir, 5, {"data.train=" + dir + "/missing.txt"})), ConfigError);
}

TEST(Train, AModelThatCannotFitInMemoryIsRefusedBeforeAnyAllocation) {
  const std::string dir = make_tiny_corpus("too_big");
  for (const auto& [override_, key] : std::vector<std::pair<std::string, std::string>>{
           {"model.encoder_layers=1000000000", "model.encoder_layers"},
           {"model.max_positions=2000000000", "model.max_positions"},  // within the schema's int32 bounds
           {"model.ffn_dim=2000000000", "model.ffn_dim"},
           {"training.tokens_per_batch=1000000000", "training.tokens_per_batch"}}) {
    try {
      train(options(dir, 2, {override_}));
      ADD_FAILURE() << override_ << " was accepted";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--set " + key + ": this model and its training state need at least"), std::string::npos) << m;
      EXPECT_NE(m.find("and this machine has"), std::string::npos) << m;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/run")) << "refused before any work";
  for (const char* shipped : {"tiny", "small-linear", "small-softmax", "small-linear-encoder", "base-linear"})
    EXPECT_NO_THROW(check_memory(load_recipe(std::string(TARN_SOURCE_DIR) + "/recipes/" + shipped + ".yaml")))
        << shipped;
}

// Softmax attention trained with attention dropout keeps each query-key pair's probability:
// on long sequences that, not the model, is what cannot fit, and the refusal says so. Without
// attention dropout the blocked kernel keeps none, and the same recipe passes.
TEST(Train, SoftmaxAttentionDropoutOnLongSequencesIsRefusedNamingIt) {
  std::vector<std::string> long_softmax = {"model.max_positions=65536", "data.max_source_len=65536",
                                           "data.max_target_len=65536", "training.tokens_per_batch=65536"};
  for (const char* stack : {"encoder_self", "decoder_self", "cross"})
    long_softmax.push_back(std::string("model.attention.") + stack + ".kind=softmax");
  std::vector<std::string> with_dropout = long_softmax;
  with_dropout.push_back("model.attention_dropout=0.1");
  try {
    check_memory(load_recipe(testing::tiny_recipe(), with_dropout));
    ADD_FAILURE() << "2 x 65536^2 probabilities per head and layer were not refused";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--set model.attention_dropout: "), std::string::npos) << m;
    EXPECT_NE(m.find("keeps every query-key pair's probability"), std::string::npos) << m;
  }
  long_softmax.push_back("model.attention_dropout=0");
  EXPECT_NO_THROW(check_memory(load_recipe(testing::tiny_recipe(), long_softmax)));
}

// The up-front estimate must stay below what a step really holds (else it would refuse recipes
// that fit), and not so far below that it misses what it claims to count.
TEST(Train, MemoryEstimateIsALowerBoundOfTheLivePeak) {
  const std::string dir = make_tiny_corpus("estimate");
  testing::write_corpus(dir + "/train.txt", 3000, 1);
  const std::vector<std::string> extra = {"training.tokens_per_batch=4096", "validation.every_steps=0",
                                          "model.d_model=128", "model.ffn_dim=512"};
  const TrainOptions o = options(dir, 10, extra);
  const TrainSummary r = train(o);
  const Recipe recipe = load_recipe(o.recipe_path, o.overrides);
  const Tokenizer tok = Tokenizer::load(dir + "/spm.model");
  const TrainingMemory m = training_memory(recipe, tok.vocab_size());
  const double live = static_cast<double>(r.live_peak_bytes);
  EXPECT_LE(m.total(), live) << "estimated " << m.total() / 1048576 << " MiB, live peak " << live / 1048576 << " MiB";
  EXPECT_GE(m.total(), 0.5 * live) << "estimated " << m.total() / 1048576 << " MiB, live peak " << live / 1048576
                                   << " MiB";
}

TEST(Train, NonFiniteStepsStopTheRunAndKeepTheLastGoodCheckpoint) {
  const std::string dir = make_tiny_corpus("nonfinite");
  train(options(dir, 4, {"validation.every_steps=0"}));
  // An absurd learning rate blows the weights up within a few steps.
  const TrainSummary r =
      train(options(dir, 60, {"optimizer.lr=1e30", "optimizer.clip_norm=0", "training.max_bad_steps=2",
                              "optimizer.schedule=constant", "validation.every_steps=0"}));
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.stop_reason, "non-finite");
  EXPECT_TRUE(latest_valid_checkpoint(dir + "/run").has_value());
}

// The process's resident peak during training stays within 1.5x of what the allocator had live
// at its peak plus the data set (issue 16): freed blocks of the many batch shapes must not
// pile up. Batches of 8k tokens make the live peak dominate the fixed costs (the OpenBLAS
// buffers, the tokenizer), which the margin below covers.
TEST(Train, ResidentPeakStaysWithinTheBoundOfTheLivePeak) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer keeps freed memory in quarantine and maps shadow memory: the "
                  "process's resident size is not the allocator's (the Release build runs this test)";
#endif
  const std::string dir = make_tiny_corpus("resident");
  testing::write_corpus(dir + "/train.txt", 3000, 1);  // 3000 lines: many batch shapes
  // One step elsewhere first: the tokenizer, libraries and thread pools are up before the peak is reset.
  train(options(dir, 1, {"validation.every_steps=0", "checkpoints.dir=" + dir + "/warm"}));
  std::ofstream("/proc/self/clear_refs") << "5";        // VmHWM := VmRSS (Linux 4.0 and later)
  const int64_t before = resident_memory().peak_bytes;
  const TrainSummary r =
      train(options(dir, 20, {"training.tokens_per_batch=8192", "validation.every_steps=20", "model.d_model=128",
                              "model.ffn_dim=512", "data.max_source_len=128", "data.max_target_len=128"}));
  ASSERT_GT(r.live_peak_bytes, 0);
  const int64_t grown = r.rss_peak_bytes - before;
  constexpr int64_t kFixedCosts = 48 << 20;  // OpenBLAS buffers, the data set
  EXPECT_LE(grown, 1.5 * static_cast<double>(r.live_peak_bytes) + kFixedCosts)
      << "resident peak grew by " << grown / 1048576 << " MiB for a live peak of " << r.live_peak_bytes / 1048576
      << " MiB";
}

}  // namespace
}  // namespace tarn::app
