#include "tools/bench/tarn/bench_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/log/log.h"
#include "framework/rng.h"
#include "kernels/check.h"
#include "layers/bart.h"
#include "tools/bench/tarn/bench_common.h"
#include "app/generate.h"
#include "app/recipe/recipe.h"
#include "app/session.h"
#include "app/trained_model.h"

namespace tarn::app {
namespace {

constexpr const char* kDescription = R"(Per-token generation latency and decoding-state memory against position: linear
attention's recurrent state against softmax's key/value cache.

Greedy generation, one token per step, from a random source, for --positions steps (no stop
at </s>). Per position: the step's latency (logits read back to the host and argmax included),
as the median over bins of positions, and the decoding state's memory: what the allocator holds
beyond the model and the encoder output (softmax: the key/value cache; linear: the recurrent
state S and normaliser z, whatever the position).
A RECIPE builds its model with random weights, once per --attention kind (recipe: the
recipe's own attention, e.g. hybrid's window and linear state), with enough positions; a CHECKPOINT (a checkpoint or run folder) decodes with its own weights and attention,
up to its max_positions. Sizes whose cache would not fit in --max-gib are refused up front.)";

// The command line of `tarn bench decode`.
struct DecodeFlags {
  BenchCommon common;
  std::string what;  // a recipe, or a checkpoint or run folder
  int64_t positions = 10000, points = 100, source_len = 64;
  std::vector<std::string> kinds = {"softmax", "linear"};
  CLI::Option* kinds_flag = nullptr;  // given or not: a checkpoint refuses it
  std::string device;                 // "": the recipe's
};

struct DecodeSetup {
  std::string attention;  // the decoder self-attention's kind: "softmax" or "linear"
  std::unique_ptr<BartForConditionalGeneration> model;
};

// The decoder self-attention's kind, or its layers' kinds joined by "+" when chosen per layer.
std::string attention_name(const BartConfig& cfg) {
  if (cfg.attention.decoder_self.per_layer.empty()) return attention_kind_name(cfg.attention.decoder_self.kind);
  std::string name;
  for (const AttentionConfig& a : cfg.attention.decoder_self.per_layer) name += (name.empty() ? "" : "+") + std::string(attention_kind_name(a.kind));
  return name;
}

// The CSV rows of one model: positions in bins of positions / points, each bin's median latency.
void decode_rows(const DecodeSetup& s, Device device, int64_t positions, int64_t points, int64_t source_len,
                 BenchOutput& out) {
  const BartConfig& cfg = s.model->config();
  NoGradGuard no_grad;
  Philox rng(5);
  std::vector<int32_t> src(source_len);
  for (int32_t& id : src) id = 4 + static_cast<int32_t>(rng.below(static_cast<uint32_t>(cfg.vocab_size - 4)));
  src.back() = cfg.eos_token_id;
  const PaddingMask padding(src.size(), 0);
  const Tensor encoded = s.model->encode(src, Shape{1, source_len}, padding);
  const int64_t baseline = memory_stats(device).current_bytes;
  DecodingState state = s.model->start_decoding(encoded, padding);
  std::vector<int32_t> token = {cfg.decoder_start_token_id};
  const int64_t bin = std::max<int64_t>(1, positions / points);
  std::vector<double> ms;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t p = 1; p <= positions; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor logits = s.model->decode_step(state, token).to(Device::cpu());
    const float* row = logits.f32();
    token[0] = static_cast<int32_t>(std::max_element(row, row + cfg.vocab_size) - row);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (p % bin != 0 && p != positions) continue;
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    const double live = static_cast<double>(memory_stats(device).current_bytes - baseline);
    out.row({s.attention, std::to_string(p), csv_number(ms[ms.size() / 2], 4), csv_number(live / 1048576.0, 3)});
    ms.clear();
    if (p % (bin * 10) == 0 || p == positions)
      log::progress("bench", str_cat(s.attention, ": position ", log::thousands(p), "/", log::thousands(positions), ", ",
                                     log::duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())));
  }
}

int run(const DecodeFlags& f) {
  const std::string& what = f.what;
  const int64_t positions = f.positions, points = f.points, source_len = f.source_len;

  std::vector<DecodeSetup> setups;
  Device device;
  if (std::filesystem::is_directory(what)) {
    TARN_CHECK(f.kinds_flag->count() == 0, "--attention: a checkpoint decodes with its own attention (give a recipe to compare)");
    TrainedModel t = load_trained_model(what);
    device = t.model->parameters().front()->device();
    const BartConfig& cfg = t.model->config();
    TARN_CHECK(positions <= cfg.max_position_embeddings && source_len <= cfg.max_position_embeddings, "--positions ",
               positions, " / --source-len ", source_len, ": this checkpoint's model has ", cfg.max_position_embeddings,
               " positions");
    setups.push_back({attention_name(cfg), std::move(t.model)});
  } else {
    Recipe recipe = load_recipe(what);
    if (!f.device.empty()) recipe.training.device = f.device;
    configure_threads(recipe);
    device = training_device(recipe);
    recipe.model.max_position_embeddings = std::max({recipe.model.max_position_embeddings, positions, source_len});
    const int64_t vocab = recipe.model.vocab_size > 0 ? recipe.model.vocab_size : recipe.data.tokenizer.train.vocab_size;
    const BartConfig base = model_config(recipe, vocab);
    for (const std::string& kind : f.kinds) {
      const BartConfig cfg = with_attention_kind(base, kind, base.attention.decoder_self);
      auto model = std::make_unique<BartForConditionalGeneration>(cfg, 1);
      model->to(device);
      model->eval();
      setups.push_back({kind == "recipe" ? attention_name(cfg) : kind, std::move(model)});
    }
  }
  const double max_bytes = bench_memory_budget(f.common, device);
  for (const DecodeSetup& s : setups) {
    // What `tarn generate` checks: the states of every decoder layer, the encoder output, the logits.
    const double need = decoding_memory_bytes(s.model->config(), 1, source_len, positions);
    TARN_CHECK(need <= max_bytes, "--positions ", positions, ": ", s.attention, " decoding needs ", gibibytes(need),
               ", limit ", gibibytes(max_bytes), " (--max-gib)");
  }
  BenchOutput out(f.common.out, "decode", "attention,position,ms_per_token,state_MiB");
  for (const DecodeSetup& s : setups) {
    log::info("bench", "decode ", s.attention, " on ", device.str(), ": ", log::thousands(positions), " positions");
    decode_rows(s, device, positions, points, source_len, out);
  }
  out.finish(f.common.command_line, device);
  return 0;
}

void add_decode_flags(CLI::App& app, DecodeFlags& f) {
  app.add_option("RECIPE|CHECKPOINT", f.what, "a recipe (random weights), or a checkpoint or run folder")->required();
  cli::add_integer(app, "--positions", f.positions, 1, int64_t{1} << 24, "decoded positions", "P");
  cli::add_integer(app, "--points", f.points, 1, 100000, "rows of the CSV, positions evenly spaced", "K");
  cli::add_integer(app, "--source-len", f.source_len, 1, 65536, "source tokens", "S");
  f.kinds_flag = cli::add_list(app, "--attention", f.kinds,
                               "softmax, linear (every stack), recipe (as the recipe says); given a recipe only",
                               cli::one_of({"softmax", "linear", "recipe"}));
  add_recipe_device_flag(app, f.device, "cpu, cuda or cuda:i; recipe only");
}

}  // namespace

cli::Command add_bench_decode(CLI::App& bench, const std::string& command_line) {
  return bench_command(bench, command_line, "decode", kDescription, "the decoding state", add_decode_flags, run);
}

}  // namespace tarn::app
