#include "tools/bench/tarn/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/config/recipe.h"
#include "framework/log/log.h"
#include "framework/rng.h"
#include "kernels/check.h"
#include "layers/bart.h"
#include "tools/bench/tarn/bench_common.h"
#include "app/session.h"
#include "app/trained_model.h"

namespace tarn::app {
namespace {

constexpr const char* kUsage = R"(usage: tarn bench decode RECIPE.yaml|CHECKPOINT [options]

Greedy generation, one token per step, from a random source, for --positions steps (no stop
at </s>). Per position: the step's latency (logits read back to the host and argmax included),
as the median over bins of positions, and the decoding state's memory: what the allocator holds
beyond the model and the encoder output (softmax: the key/value cache; linear: the recurrent
state S and normaliser z, whatever the position).
A RECIPE builds its model with random weights, once per --attention kind, with enough
positions; a CHECKPOINT (a checkpoint or run folder) decodes with its own weights and attention,
up to its max_positions. Sizes whose cache would not fit in --max-gib are refused up front.

options:
  --positions P       decoded positions (default 10000)
  --points K          rows of the CSV, positions evenly spaced (default 100)
  --source-len S      source tokens (default 64)
  --attention LIST    recipe only: softmax, linear (default softmax,linear)
  --device D          default: the recipe's training.device
  --max-gib G         memory the decoding state may need (default: 80% of this machine's; of the GPU's free memory on cuda)
  --out DIR           write DIR/decode.csv and DIR/decode.json (default: CSV on stdout)
)";

struct DecodeSetup {
  std::string attention;  // the decoder self-attention's kind: "softmax" or "linear"
  std::unique_ptr<BartForConditionalGeneration> model;
};

std::string attention_name(const BartConfig& cfg) {
  return cfg.decoder_self_attention.is_linear() ? "linear" : "softmax";
}

// Bytes of decoding state at `positions`: softmax keeps keys and values of every position in
// every decoder layer (and a concatenation copies them once more); linear attention keeps
// (d_head x (d_head + 1)) per head and layer.
double state_bytes(const BartConfig& c, int64_t positions) {
  const double layers = static_cast<double>(c.decoder_layers), d = static_cast<double>(c.d_model);
  if (!c.decoder_self_attention.is_linear()) return 4 * layers * 2 * static_cast<double>(positions) * d * 2;
  const double dh = d / static_cast<double>(c.decoder_attention_heads);
  return 4 * layers * d * (dh + 1);
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

}  // namespace

int bench_decode(int argc, char** argv) {
  if (asked_for_help(argc, argv, kUsage)) return 0;
  const BenchFlags f("decode", argc, argv,
                     {"positions", "points", "source-len", "attention", "device", "max-gib", "out"});
  TARN_CHECK(f.positional().size() == 1, "usage: tarn bench decode RECIPE.yaml|CHECKPOINT [options] (see --help)");
  const std::string& what = f.positional()[0];
  const int64_t positions = f.integer("positions", 10000, 1, int64_t{1} << 24);
  const int64_t points = f.integer("points", 100, 1, 100000);
  const int64_t source_len = f.integer("source-len", 64, 1, 65536);

  std::vector<DecodeSetup> setups;
  Device device;
  if (std::filesystem::is_directory(what)) {
    TARN_CHECK(!f.has("attention"), "--attention: a checkpoint decodes with its own attention (give a recipe to compare)");
    TrainedModel t = load_trained_model(what);
    device = t.model->parameters().front()->device();
    const BartConfig& cfg = t.model->config();
    TARN_CHECK(positions <= cfg.max_position_embeddings && source_len <= cfg.max_position_embeddings, "--positions ",
               positions, " / --source-len ", source_len, ": this checkpoint's model has ", cfg.max_position_embeddings,
               " positions");
    setups.push_back({attention_name(cfg), std::move(t.model)});
  } else {
    Recipe recipe = load_recipe(what);
    if (f.has("device")) recipe.training.device = f.text("device", "cpu");
    configure_threads(recipe);
    device = training_device(recipe);
    recipe.model.max_positions = std::max({recipe.model.max_positions, positions, source_len});
    const int64_t vocab = recipe.model.vocab_size > 0 ? recipe.model.vocab_size : recipe.data.tokenizer.train.vocab_size;
    const BartConfig base = model_config(recipe, vocab);
    for (const std::string& kind : f.words("attention", {"softmax", "linear"}, {"softmax", "linear"})) {
      auto model = std::make_unique<BartForConditionalGeneration>(
          with_attention_kind(base, kind, base.decoder_self_attention), 1);
      model->to(device);
      model->eval();
      setups.push_back({kind, std::move(model)});
    }
  }
  const double max_bytes = bench_memory_budget(f, device);
  for (const DecodeSetup& s : setups) {
    const double need = state_bytes(s.model->config(), positions);
    TARN_CHECK(need <= max_bytes, "--positions ", positions, ": ", s.attention, " decoding needs ", gibibytes(need),
               " of state, limit ", gibibytes(max_bytes), " (--max-gib)");
  }
  BenchOutput out(f.text("out", ""), "decode", "attention,position,ms_per_token,state_MiB");
  for (const DecodeSetup& s : setups) {
    log::info("bench", "decode ", s.attention, " on ", device.str(), ": ", log::thousands(positions), " positions");
    decode_rows(s, device, positions, points, source_len, out);
  }
  out.finish(f, device);
  return 0;
}

}  // namespace tarn::app
