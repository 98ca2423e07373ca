#include "tools/bench/tarn/bench_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/log/log.h"
#include "framework/ops/nn.h"
#include "framework/staging.h"
#include "framework/train/step.h"
#include "framework/rng.h"
#include "kernels/check.h"
#include "kernels/collectives.h"
#include "layers/bart.h"
#include "tools/bench/tarn/bench_common.h"
#include "app/recipe/recipe.h"
#include "app/session.h"

namespace tarn::app {
namespace {

constexpr const char* kDescription = R"(Training tokens/s and peak memory (allocator and resident) against sequence
length at the recipe's tokens per batch, random tokens.

Training steps of the recipe's model on random token ids, source and target both N tokens long,
batch = --tokens / N sequences (at least 1), as the trainer takes them (TrainStep: the batch up
in one asynchronous copy, forward, backward, the gradient norm, clipping to the recipe's
clip_norm and AdamW over the parameter arena in one fused update, then the step's result read
back, which waits for the device). Each figure is the median step after one warm-up step. tokens/s counts source and target tokens. Memory: the allocator's
live peak and the process's resident peak (VmHWM, reset before each configuration). A size whose
estimated training memory exceeds --max-gib is refused up front (status "skipped: ...").
--rounds R times each length's configurations R times over, in turn and in the reverse order
every other round (each round a fresh model and warm-up step): the figure is then the median of
all R x S steps, so that a slow spell on a shared machine falls on every configuration alike.)";

// The command line of `tarn bench train`.
struct TrainFlags {
  BenchCommon common;
  std::string recipe;
  std::vector<int64_t> lengths = {128, 256, 512, 1024, 2048, 4096};
  std::vector<std::string> kinds = {"softmax", "linear"};
  int64_t tokens = 0;  // 0: the recipe's training.tokens_per_batch
  int64_t steps = 3;
  int64_t rounds = 1;
  std::string device, precision;  // "": the recipe's
};

// One round of one configuration: its timed steps and peaks.
struct StepFigures {
  std::vector<double> step_s;
  double alloc_peak = 0, rss_peak = 0;
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

StepFigures time_steps(const BartConfig& cfg, Device device, Precision precision, float label_smoothing, float clip_norm,
                       int64_t batch, int64_t n, int64_t steps) {
  allocator_for(device).release_cache();  // each configuration's peaks are its own
  reset_resident_peak();
  reset_peak_memory(device);
  BartForConditionalGeneration model(cfg, 1);
  model.to(device);
  model.train();
  model.set_precision(precision);
  const std::unique_ptr<kernels::Communicator> solo = kernels::solo_communicator();
  TrainStepOptions options;
  options.clip_norm = clip_norm;
  options.defer_results = TrainStepOptions::Defer::yes;  // read once a step, below
  TrainStep step(model, *solo, *solo, options);
  Philox rng(7);
  std::vector<int32_t> src(batch * n), tgt(batch * n), labels(batch * n);  // ids >= 4: no padding
  for (auto* ids : {&src, &tgt, &labels})
    for (int32_t& id : *ids) id = 4 + static_cast<int32_t>(rng.below(static_cast<uint32_t>(cfg.vocab_size - 4)));
  const auto forward = [&](int64_t) -> std::optional<MicroBatchLoss> {
    const StagedBatch staged(device, {&src, &tgt, &labels}, {});
    MicroBatchLoss m;
    m.loss = seq2seq_loss(model.forward(src, Shape{batch, n}, {}, tgt, Shape{batch, n}), labels, cfg.pad_token_id,
                          label_smoothing, &m.counted, nullptr, CrossEntropyOptions{}.ignore_index, &m.totals);
    m.tokens = 2 * batch * n;
    return m;
  };
  std::vector<double> seconds;
  for (int64_t s = 0; s <= steps; ++s) {  // step 0 warms the allocator and the caches
    const auto t0 = std::chrono::steady_clock::now();
    step.run(1, batch * n, forward, 1e-4f);
    (void)step.settle();  // the step's record read back: waits for a device's queued work
    if (s > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  StepFigures f;
  f.step_s = std::move(seconds);
  f.alloc_peak = static_cast<double>(memory_stats(device).peak_bytes);
  f.rss_peak = static_cast<double>(resident_memory().peak_bytes);
  return f;
}

int run(TrainFlags f) {
  Recipe recipe = load_recipe(f.recipe);
  if (!f.device.empty()) recipe.training.device = f.device;
  if (!f.precision.empty()) recipe.training.precision = f.precision;
  std::sort(f.lengths.begin(), f.lengths.end());
  const int64_t tokens = f.tokens > 0 ? f.tokens : recipe.training.tokens_per_batch;
  const int64_t steps = f.steps;
  configure_threads(recipe);
  const Device device = training_device(recipe);
  const Precision precision = training_precision(recipe, device);
  const double max_bytes = bench_memory_budget(f.common, device);
  const int64_t vocab = recipe.model.vocab_size > 0 ? recipe.model.vocab_size : recipe.data.tokenizer.train.vocab_size;

  BenchOutput out(f.common.out, "train",
                  "attention,precision,N,batch,tokens_per_batch,step_ms,tokens_per_s,alloc_peak_MiB,rss_peak_MiB,status");
  // A configuration to time at one length: its model, and its rounds' figures.
  struct Config {
    std::string kind;
    BartConfig model;
    std::vector<std::string> row;  // attention .. tokens_per_batch
    StepFigures all;               // every round's steps, the largest peaks
    std::vector<double> round_ms;  // each round's median, for the log
  };
  for (int64_t n : f.lengths) {
    const int64_t batch = std::max<int64_t>(1, tokens / n);
    Recipe sized = recipe;  // the memory estimate of this batch and length
    sized.training.tokens_per_batch = batch * n;
    sized.model.max_position_embeddings = std::max(recipe.model.max_position_embeddings, n);
    sized.data.max_source_len = sized.data.max_target_len = n;
    const BartConfig recipe_model = model_config(sized, vocab);
    // training_memory is a lower bound (small-linear: 561 of 619 MiB live): a quarter more
    // covers what it leaves out, so that a size that passes is not killed by the OS.
    const double need = 1.25 * training_memory(sized, vocab).total();
    std::vector<Config> configs;
    for (const std::string& kind : f.kinds) {
      std::vector<std::string> row = {kind, precision_name(precision), std::to_string(n), std::to_string(batch),
                                      std::to_string(batch * n)};
      if (need > max_bytes) {
        const std::string why = str_cat("needs ", gibibytes(need), ", limit ", gibibytes(max_bytes), " (--max-gib)");
        log::info("bench", kind, " N=", n, ": skipped: ", why);
        row.insert(row.end(), {"", "", "", "", "skipped: " + why});
        out.row(row);
        continue;
      }
      configs.push_back({kind, with_attention_kind(recipe_model, kind, recipe_model.attention.encoder_self), row, {}, {}});
    }
    for (int64_t round = 0; round < f.rounds; ++round)
      for (size_t c = 0; c < configs.size(); ++c) {
        Config& cfg = configs[round % 2 == 0 ? c : configs.size() - 1 - c];  // every other round reversed
        log::info("bench", cfg.kind, " N=", n, ", batch ", batch, ": ", steps + 1, " steps",
                  f.rounds > 1 ? str_cat(" (round ", round + 1, " of ", f.rounds, ")") : std::string(), " ...");
        const StepFigures r = time_steps(cfg.model, device, precision,
                                         static_cast<float>(recipe.training.label_smoothing),
                                         static_cast<float>(recipe.optimizer.clip_norm), batch, n, steps);
        cfg.all.step_s.insert(cfg.all.step_s.end(), r.step_s.begin(), r.step_s.end());
        cfg.all.alloc_peak = std::max(cfg.all.alloc_peak, r.alloc_peak);
        cfg.all.rss_peak = std::max(cfg.all.rss_peak, r.rss_peak);
        cfg.round_ms.push_back(median(r.step_s) * 1e3);
      }
    for (Config& cfg : configs) {
      const double step_s = median(cfg.all.step_s);
      const double tps = 2.0 * static_cast<double>(batch * n) / step_s;
      std::string rounds;
      if (cfg.round_ms.size() > 1) {
        const auto [lo, hi] = std::minmax_element(cfg.round_ms.begin(), cfg.round_ms.end());
        rounds = str_cat(" (median of ", cfg.all.step_s.size(), " steps in ", cfg.round_ms.size(),
                         " rounds; round medians ", csv_number(*lo, 1), "-", csv_number(*hi, 1), " ms)");
      }
      log::info("bench", cfg.kind, " N=", n, ": ", csv_number(step_s * 1e3, 1), " ms per step", rounds, ", ",
                log::thousands(static_cast<long long>(tps)), " tokens/s, allocator peak ",
                log::mebibytes(static_cast<int64_t>(cfg.all.alloc_peak)), ", RSS peak ",
                log::mebibytes(static_cast<int64_t>(cfg.all.rss_peak)));
      cfg.row.insert(cfg.row.end(), {csv_number(step_s * 1e3, 1), csv_number(tps, 0),
                                     csv_number(cfg.all.alloc_peak / 1048576.0, 1),
                                     csv_number(cfg.all.rss_peak / 1048576.0, 1), "ok"});
      out.row(cfg.row);
    }
  }
  out.finish(f.common.command_line, device);
  return 0;
}

void add_train_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("RECIPE.yaml", f.recipe, "the recipe whose model and settings to time")->required();
  cli::add_list(app, "--n", f.lengths, "sequence lengths", cli::integer(1, int64_t{1} << 20));
  cli::add_list(app, "--attention", f.kinds,
                "softmax, linear (every stack; linear keeps the recipe's feature map), recipe (as the recipe says)",
                cli::one_of({"softmax", "linear", "recipe"}));
  cli::add_integer(app, "--tokens", f.tokens, 1, int64_t{1} << 24, "target tokens per batch", "T")
      ->default_str("the recipe's training.tokens_per_batch");
  cli::add_integer(app, "--steps", f.steps, 1, 10000, "timed steps per configuration and round", "S");
  cli::add_integer(app, "--rounds", f.rounds, 1, 1000,
                   "rounds over a length's configurations, alternating their order (see above)", "R");
  add_recipe_device_flag(app, f.device, "cpu, cuda or cuda:i");
  app.add_option("--precision", f.precision, "f32 or bf16")
      ->type_name("P")
      ->default_str("the recipe's training.precision");
}

}  // namespace

cli::Command add_bench_train(CLI::App& bench, const std::string& command_line) {
  return bench_command(bench, command_line, "train", kDescription, "a configuration", add_train_flags, run);
}

}  // namespace tarn::app
