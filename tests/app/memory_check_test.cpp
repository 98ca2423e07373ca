// The memory pre-check counts every size that scales a buffer (issue 56, item 3: conv_size
// 10^12 passed `tarn config` and ended `tarn train` in std::bad_alloc). Every integer key of the
// model section is driven to its schema maximum, with the settings that make it apply: either it
// is refused up front (ConfigError, exit 2) naming the key, or it fits, and then a short run
// completes with the allocator's live peak at or above the estimate (the estimate is a lower
// bound: app/session.h). Decoding counts beam x length and the convolutions' tails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "app/generate.h"
#include "app/recipe/recipe.h"
#include "app/session.h"
#include "app/trainer.h"
#include "data/tokenizer.h"
#include "framework/allocator.h"
#include "framework/config/config_error.h"
#include "framework/config/schema.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {

using testing::make_tiny_corpus;
using testing::tiny_overrides;
using testing::tiny_recipe;

enum class Outcome { refused, fits, scales_nothing };

struct SizeKey {
  Outcome outcome;
  // --set lines that make the key apply in stack STACK (replaced by its name).
  std::vector<std::string> enabling;
};

// Every integer key of the model section: what its largest accepted value does on the tiny
// recipe (64 tokens at most, 1,024 a batch). A key added later is in neither list until someone
// looks at what its value scales: the test fails.
const std::map<std::string, SizeKey> kModelKeys = {
    {"model.vocab_size", {Outcome::refused, {}}},      // V x d embeddings, logits
    {"model.d_model", {Outcome::refused, {"model.heads=1"}}},  // everything (2^31 - 1 is prime)
    {"model.heads", {Outcome::refused, {}}},           // must divide d_model
    {"model.encoder_layers", {Outcome::refused, {}}},  // unbounded in the schema: only this check
    {"model.decoder_layers", {Outcome::refused, {}}},
    {"model.ffn_dim", {Outcome::refused, {}}},
    {"model.max_positions", {Outcome::refused, {}}},  // two (max_positions + 2) x d tables
    // Taps of q, k and v: conv_size x d_model weights each, with gradients and moments.
    {"model.attention.*.conv_size", {Outcome::refused, {"STACK.kind=gated"}}},
    // m x head_dim projections and m features of every query and key.
    {"model.attention.*.favor_features", {Outcome::refused, {"STACK.kind=linear", "STACK.feature_map=favor"}}},
    // Past 5,120 features (C(r + P, P)) the schema refuses it.
    {"model.attention.*.taylor_dim", {Outcome::refused, {"STACK.kind=linear", "STACK.feature_map=taylor"}}},
    // 4 (the largest accepted): 4,845 features at r = 16, counted, and they fit.
    {"model.attention.*.taylor_order", {Outcome::fits, {"STACK.kind=linear", "STACK.feature_map=taylor"}}},
    // The window reads at most the sequence: the blocked kernels keep no window-sized buffer.
    {"model.attention.*.window", {Outcome::fits, {"STACK.kind=hybrid"}}},
    // Clamped to the sequence by the kernels; aligned cross-attention's C x C scores counted.
    {"model.attention.*.chunk", {Outcome::fits, {"STACK.kind=linear"}}},
    {"model.attention.*.favor_redraw_every", {Outcome::scales_nothing, {}}},  // a step count
    // Routed cross-attention (kind routed, set below for the cross stack; self-attention stacks
    // ignore them): one chunk of the whole source, read key by key; every chunk there is.
    {"model.attention.*.route_chunk", {Outcome::fits, {}}},
    {"model.attention.*.route_top", {Outcome::fits, {}}},
    // A root above the chunks there are: one level, as route_root 0.
    {"model.attention.*.route_root", {Outcome::fits, {}}},
    // 64 chosen at each level of a tree down from one landmark: every landmark there is.
    {"model.attention.*.route_beam", {Outcome::fits, {"STACK.route_root=1"}}},
};

// model.attention.cross.chunk -> model.attention.*.chunk
std::string pattern(const std::string& path) {
  const std::string prefix = "model.attention.";
  if (path.rfind(prefix, 0) != 0) return path;
  const size_t dot = path.find('.', prefix.size());
  return dot == std::string::npos ? path : prefix + "*" + path.substr(dot);
}

std::string stack_of(const std::string& path) {
  const std::string prefix = "model.attention.";
  return path.substr(0, path.find('.', prefix.size()));
}

int64_t largest_value(const config::Field& f) {
  if (pattern(f.path) == "model.attention.*.taylor_order") return 4;  // 2 or 4
  if (std::isinf(f.hi) || f.hi >= 9.2e18) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(f.hi);
}

TEST(MemoryCheck, EveryModelSizeKeyAtItsSchemaMaximumIsRefusedNamingItOrFitsAndRuns) {
  const std::string dir = make_tiny_corpus("memory_check_sizes");
  int checked = 0, runs = 0;
  std::set<std::string> seen;
  for (const config::Field* f : recipe_schema().fields()) {
    if (f->type != config::FieldType::integer || f->path.rfind("model.", 0) != 0) continue;
    const auto it = kModelKeys.find(pattern(f->path));
    if (it == kModelKeys.end()) {
      ADD_FAILURE() << f->path << ": a model integer key this test does not know: say what its value scales";
      continue;
    }
    seen.insert(it->first);
    if (it->second.outcome == Outcome::scales_nothing) continue;
    const int64_t value = largest_value(*f);
    std::vector<std::string> overrides;
    for (std::string e : it->second.enabling)
      overrides.push_back(e.rfind("STACK", 0) == 0 ? e.replace(0, 5, stack_of(f->path)) : e);
    if (f->path == "model.attention.cross.chunk") overrides.push_back("model.attention.cross.align_decay=0.9");
    if (f->path.rfind("model.attention.cross.route_", 0) == 0) overrides.push_back("model.attention.cross.kind=routed");
    overrides.push_back(f->path + "=" + std::to_string(value));
    SCOPED_TRACE(f->path + " = " + std::to_string(value));
    ++checked;
    if (it->second.outcome == Outcome::refused) {
      try {
        check_memory(load_recipe(tiny_recipe(), overrides));
        ADD_FAILURE() << "accepted";
      } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("--set " + f->path + ": "), std::string::npos) << m;
      }
      continue;
    }
    // It fits: the check passes, and a short run completes above the estimate.
    ASSERT_NO_THROW(check_memory(load_recipe(tiny_recipe(), overrides)));
    std::vector<std::string> all = tiny_overrides(dir, 2);
    all.push_back("validation.every_steps=0");
    all.push_back("checkpoints.dir=" + dir + "/run_" + std::to_string(runs++));
    all.insert(all.end(), overrides.begin(), overrides.end());
    TrainOptions o;
    o.recipe_path = tiny_recipe();
    o.overrides = all;
    reset_peak_memory();  // this run's peak, not the process's (TrainSummary's is since start)
    const TrainSummary r = train(o);
    EXPECT_EQ(r.steps, 2);
    const double peak = static_cast<double>(memory_stats().peak_bytes);
    const Tokenizer tok = Tokenizer::load(dir + "/spm.model");
    const double estimate = training_memory(load_recipe(tiny_recipe(), all), tok.vocab_size()).total();
    EXPECT_LE(estimate, peak) << "estimated " << estimate / 1048576 << " MiB, live peak " << peak / 1048576 << " MiB";
    std::printf("[memory_check] %s = %lld: estimate %.1f MiB, live peak %.1f MiB\n", f->path.c_str(),
                static_cast<long long>(value), estimate / 1048576, peak / 1048576);
  }
  std::set<std::string> listed;
  for (const auto& [key, size] : kModelKeys) listed.insert(key);
  EXPECT_EQ(seen, listed) << "a key listed here is no longer in the schema";
  EXPECT_GE(checked, 20);
}

// The case, by `tarn train`'s path: refused before any work, naming the key; and in a
// per-layer entry, named at the entry.
TEST(MemoryCheck, ConvolutionTapsThatCannotFitAreRefusedBeforeAnyWork) {
  const std::string dir = make_tiny_corpus("memory_check_conv");
  for (const char* stack : {"encoder_self", "decoder_self", "cross"}) {
    const std::string prefix = std::string("model.attention.") + stack;
    TrainOptions o;
    o.recipe_path = tiny_recipe();
    o.overrides = tiny_overrides(dir, 2);
    for (const std::string& s : {prefix + ".kind=delta", prefix + ".conv_size=1000000000000"}) o.overrides.push_back(s);
    try {
      train(o);
      ADD_FAILURE() << stack << ": conv_size 10^12 was accepted";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--set " + prefix + ".conv_size: this model and its training state need at least"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("1000000000000 convolution taps"), std::string::npos) << m;
      EXPECT_NE(m.find("lower it (default 4)"), std::string::npos) << m;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/run")) << "refused before any work";
  try {
    check_memory(load_recipe(tiny_recipe(), {"model.attention.encoder_self.layers=[delta, {kind: gated, conv_size: "
                                             "1000000000000}]"}));
    ADD_FAILURE() << "a per-layer conv_size of 10^12 was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.attention.encoder_self.layers[1].conv_size: this model"), std::string::npos) << m;
  }
  // A stack's value that its entries inherit is named at the stack.
  try {
    check_memory(load_recipe(tiny_recipe(), {"model.attention.decoder_self.conv_size=1000000000000",
                                             "model.attention.decoder_self.layers=[delta, linear]"}));
    ADD_FAILURE() << "an inherited conv_size of 10^12 was accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--set model.attention.decoder_self.conv_size: this model"), std::string::npos) << m;
  }
  // Sensible taps pass.
  EXPECT_NO_THROW(check_memory(load_recipe(tiny_recipe(), {"model.attention.decoder_self.kind=delta",
                                                           "model.attention.decoder_self.conv_size=8"})));
}

// Wide feature maps: FAVOR+'s m at 2^31 - 1 is named; the estimate grows with the features kept
// for every token.
TEST(MemoryCheck, FeatureCountsScaleTheEstimate) {
  auto estimate = [](std::vector<std::string> o) { return training_memory(load_recipe(tiny_recipe(), o)).total(); };
  const double elu1 = estimate({});
  const double favor64 = estimate({"model.attention.encoder_self.feature_map=favor",
                                   "model.attention.encoder_self.favor_features=64"});
  const double favor256 = estimate({"model.attention.encoder_self.feature_map=favor",
                                    "model.attention.encoder_self.favor_features=256"});
  const double hedgehog = estimate({"model.attention.encoder_self.feature_map=hedgehog"});
  const double taylor4 = estimate({"model.attention.encoder_self.feature_map=taylor",
                                   "model.attention.encoder_self.taylor_order=4"});
  EXPECT_LT(elu1, favor64);
  EXPECT_LT(favor64, favor256);
  EXPECT_LT(elu1, hedgehog);
  // 4,845 features of 1,024 tokens, queries and keys, 4 heads, 2 layers: at least 300 MB more.
  EXPECT_GT(taylor4 - elu1, 2 * 1024 * 2 * 4 * (4845 - 16) * 4.0);
}

// Decoding: beam x length grows softmax's and hybrid's caches (hybrid up to its window), the
// delta rule's convolution tails grow with conv_size, the sums stay finite at the flags' and
// the schema's maxima, and past the budget decoding is refused naming --beam and --max-length.
TEST(MemoryCheck, DecodingCountsBeamTimesLengthAndTheConvolutionTails) {
  BartConfig base = BartConfig::preset("base");
  base.vocab_size = 32000;
  base.max_position_embeddings = 65536;
  constexpr int64_t kBeam = 64, kLength = 65536;  // tools/tarn/main.cpp's --beam and --max-length maxima
  BartConfig softmax = base, hybrid = base, delta = base, linear = base;
  softmax.with_attention(AttentionConfig::softmax_attention());
  linear.with_attention(AttentionConfig::linear_attention());
  AttentionConfig h;
  h.kind = AttentionKind::hybrid;
  h.window = AttentionConfig::kMaxWindow;
  hybrid.with_attention(h);
  AttentionConfig g;
  g.kind = AttentionKind::delta;
  delta.with_attention(g);
  for (const BartConfig* c : {&softmax, &hybrid, &delta, &linear})
    EXPECT_TRUE(std::isfinite(decoding_memory_bytes(*c, kBeam, 512, kLength))) << c->str();
  // A window past the length holds what softmax does; the length grows both by beam x tokens.
  EXPECT_GE(decoding_memory_bytes(hybrid, kBeam, 512, kLength), decoding_memory_bytes(softmax, kBeam, 512, kLength));
  const double per_token = kBeam * base.decoder_layers * 2 * 2 * 4.0 * base.d_model;  // copy, k+v, f32
  EXPECT_DOUBLE_EQ(decoding_memory_bytes(softmax, kBeam, 512, kLength) - decoding_memory_bytes(softmax, kBeam, 512, 1),
                   (kLength - 1) * per_token);
  // Tails: conv_size - 1 rows of q, k and v kept, and a window of conv_size rows convolved.
  BartConfig taps = delta;
  taps.attention.decoder_self.conv_size = 1004;
  EXPECT_DOUBLE_EQ(decoding_memory_bytes(taps, kBeam, 512, kLength) - decoding_memory_bytes(delta, kBeam, 512, kLength),
                   kBeam * base.decoder_layers * 4.0 * base.d_model * (3 + 2) * 1000);
  taps.attention.decoder_self.conv_size = std::numeric_limits<int64_t>::max();
  const double huge = decoding_memory_bytes(taps, 1, 512, 1);
  EXPECT_TRUE(std::isfinite(huge));
  EXPECT_GT(huge, 1e21);

  GenerateOptions o;
  o.beam = kBeam;
  o.max_length = kLength;
  const double need = decoding_memory_bytes(softmax, kBeam, 512, kLength);
  EXPECT_GT(need, 3e11) << "64 x 65,536 tokens of 6 layers' keys and values";
  EXPECT_NO_THROW(check_decoding_memory(softmax, kBeam, 512, o, need));
  for (double budget : {need - 1, usable_memory_bytes()}) {
    if (budget >= need) continue;  // a machine with 300 GB to spare
    try {
      check_decoding_memory(softmax, kBeam, 512, o, budget);
      ADD_FAILURE() << "decoding past the budget was not refused";
    } catch (const Error& e) {
      const std::string m = e.what();
      for (const char* part : {"--beam 64", "--max-length 65536", "lower --beam or --max-length"})
        EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
    }
  }
  EXPECT_THROW(check_decoding_memory(taps, 1, 512, o, usable_memory_bytes()), Error);
}

}  // namespace
}  // namespace tarn::app
