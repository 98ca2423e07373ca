// Training-step speed of the BART model on the CPU: forward, backward and AdamW on random
// token ids, for sequence lengths N (source and target both N tokens), reported as tokens per
// second and peak memory. `train_bench --help` gives the flags.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/model_presets.h"
#include "framework/optim/adamw.h"
#include "framework/rng.h"
#include "kernels/blas_info.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "layers/bart.h"
#include "tools/bench/common/bench_util.h"
#include "tools/cli.h"

namespace {

constexpr const char* kDescription = R"(Training-step speed of the BART model on the CPU: forward, backward and AdamW on
random token ids, for sequence lengths N (source and target both N tokens), reported as
tokens per second (B*N target tokens per step, the count PyTorch-side scripts usually
report, and all tokens, source and target) and peak memory. CSV on stdout.)";

struct Options {
  std::string preset = "small", attention = "linear", precision = "f32";
  std::vector<int64_t> lengths = {512, 2048};
  int64_t tokens = 4096, steps = 5;
};

void add_flags(CLI::App& app, Options& o) {
  std::vector<std::string> presets;
  for (const tarn::ModelPreset& p : tarn::kModelPresets) presets.push_back(p.name);
  app.add_option("--preset", o.preset, "the model size")->type_name("NAME")->check(tarn::cli::one_of(presets));
  app.add_option("--attention", o.attention, "every attention stack's kind")
      ->type_name("KIND")
      ->check(tarn::cli::one_of({"linear", "softmax"}));
  tarn::cli::add_list(app, "--n", o.lengths, "sequence lengths", tarn::cli::integer(1, int64_t{1} << 20));
  tarn::cli::add_integer(app, "--tokens", o.tokens, 1, int64_t{1} << 24,
                         "target tokens per batch (batch = T / N sequences, at least 1)", "T");
  tarn::cli::add_integer(app, "--steps", o.steps, 1, 10000, "timed steps, after one warm-up step", "S");
  app.add_option("--precision", o.precision, "both: one row per precision")
      ->type_name("P")
      ->check(tarn::cli::one_of({"f32", "bf16", "both"}));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tarn;
  Options o;
  if (const std::optional<int> status =
          bench::start_bench(argc, argv, kDescription, "train_bench", [&](CLI::App& app) { add_flags(app, o); }))
    return *status;
  const std::string &preset = o.preset, &attention = o.attention, &precision = o.precision;
  const std::vector<int64_t>& lengths = o.lengths;
  const int64_t tokens = o.tokens, steps = o.steps;
  if (!kernels::blas_kernel_hint().empty()) std::fprintf(stderr, "# note: %s\n", kernels::blas_kernel_hint().c_str());
  std::fprintf(stderr, "# BLAS: %s; threads %d\n", kernels::blas_info().str().c_str(), kernels::num_threads());
  std::vector<Precision> precisions;
  if (precision == "both") precisions = {Precision::f32, Precision::bf16};
  else precisions = {parse_precision(precision, "--precision")};
  for (Precision p : precisions)
    if (p == Precision::bf16)
      std::fprintf(stderr, "# bf16 GEMM: %s%s\n", bf16_gemm_engine(Device::cpu()).description.c_str(),
                   bf16_gemm_engine(Device::cpu()).native ? "" : " (widened to f32: no faster)");
  std::printf("preset,attention,precision,N,batch,step_ms_median,target_tokens_per_s,all_tokens_per_s,peak_MiB\n");
  for (int64_t n : lengths)
  for (Precision p : precisions) {
    BartConfig cfg = BartConfig::preset(preset);
    cfg.max_position_embeddings = std::max<int64_t>(cfg.max_position_embeddings, n);
    cfg.with_attention(attention == "softmax" ? AttentionConfig::softmax_attention() : AttentionConfig::linear_attention());
    BartForConditionalGeneration model(cfg, 1);
    model.train();
    model.set_precision(p);
    AdamW opt(model.named_parameters(), {});
    const int64_t batch = std::max<int64_t>(1, tokens / n);
    Philox rng(7);
    std::vector<int32_t> src(batch * n), tgt(batch * n), labels(batch * n);
    for (auto* v : {&src, &tgt, &labels})
      for (int32_t& id : *v) id = 4 + static_cast<int32_t>(rng.below(static_cast<uint32_t>(cfg.vocab_size - 4)));
    std::vector<double> ms;
    reset_peak_memory();
    for (int64_t s = 0; s < steps + 1; ++s) {  // the first step warms caches and the allocator
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor logits = model.forward(src, Shape{batch, n}, {}, tgt, Shape{batch, n});
      seq2seq_loss(logits, labels, cfg.pad_token_id, 0.1f).backward();
      opt.step();
      opt.zero_grad();
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double peak = memory_stats().peak_bytes / 1048576.0;
    std::printf("%s,%s,%s,%lld,%lld,%.1f,%.0f,%.0f,%.0f\n", preset.c_str(), attention.c_str(), precision_name(p), (long long)n,
                (long long)batch, med, batch * n / (med / 1e3), 2 * batch * n / (med / 1e3), peak);
    std::fflush(stdout);
  }
  if (precision != "f32")
    std::fprintf(stderr, "# oneDNN bf16 primitives made: %lld\n",
                 static_cast<long long>(kernels::cpu::bf16_gemm_primitives_created()));
  return 0;
}
