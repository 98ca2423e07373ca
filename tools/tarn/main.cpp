// The tarn command line: parses arguments and hands each subcommand to tools/tarn/*. User
// errors (bad recipe, missing file, bad flag) exit 2 with a message naming the culprit; bugs
// exit 1.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/denoising_dataset.h"
#include "data/wordnet_corpus.h"
#include "framework/config/config_error.h"
#include "framework/config/recipe.h"
#include "framework/log/log.h"
#include "kernels/mpi/mpi.h"
#include "layers/bart.h"
#include "tools/bench/tarn/bench_attention.h"
#include "tools/bench/tarn/bench_collectives.h"
#include "tools/bench/tarn/bench_common.h"
#include "tools/bench/tarn/bench_decode.h"
#include "tools/bench/tarn/bench_train.h"
#include "app/checkpoint_state.h"
#include "app/evaluate.h"
#include "app/export.h"
#include "app/generate.h"
#include "app/session.h"
#include "app/trained_model.h"
#include "app/trainer.h"
#include "app/word_errors.h"

namespace tarn::app {
namespace {

constexpr const char* kUsage = R"(tarn: linear-attention BART training on CPUs and GPUs, one process or many (mpirun)

usage: tarn <command> [options]

commands:
  train RECIPE.yaml [--set KEY=VALUE ...] [--restart]
        Train from a recipe. Resumes from the newest valid checkpoint in checkpoints.dir
        unless --restart. Ctrl-C finishes the step, writes a checkpoint and exits.
  config RECIPE.yaml [--set KEY=VALUE ...]
        Validate a recipe and print it resolved, every default filled in.
  config --keys
        Every recipe key with its default, accepted values and description.
  eval --checkpoint DIR --data FILE [--tokens-per-batch N] [--max-batches N]
        Mean NLL and perplexity over the target tokens of FILE (the checkpoint's data kind:
        denoising plain text, or source<TAB>target pairs). Under mpirun the ranks share
        the batches.
  export --checkpoint DIR --out DIR
        model.safetensors (HuggingFace BART names), config.json and spm.model.
  generate --checkpoint DIR [--beam N] [--max-length N] [--no-repeat-ngram N]
        Reads source lines on stdin, writes one generated line per source on stdout.
        --beam 1 to 64 (default 1, greedy), --max-length 1 to 65536 tokens (default 128; at most the model's max_positions),
        --no-repeat-ngram N: never repeat an N-token sequence within one output (default 0, off).
  denoise --checkpoint DIR --data FILE [--count N] [--beam N] [--max-length N] [--no-repeat-ngram N]
        Noises the first N lines of FILE as in training and shows input, output, original;
        then the word error rate of the outputs against the originals.
  bench attention [--device cpu|cuda] [--n 128,...,65536] [--out DIR] [--help]
        Forward and forward+backward time and peak memory of softmax and linear attention
        (bidirectional, causal, cross; per feature map) against N; where linear wins.
  bench train RECIPE.yaml [--n 128,...,4096] [--attention softmax,linear] [--out DIR] [--help]
        Training tokens/s and peak memory (allocator and resident) against sequence length
        at the recipe's tokens per batch, random tokens.
  bench decode RECIPE.yaml|CHECKPOINT [--positions 10000] [--out DIR] [--help]
        Per-token generation latency and decoding-state memory against position: linear
        attention's recurrent state against softmax's key/value cache.
  bench collectives [--max-bytes B] [--iters N] [--threads N] [--help]
        All-reduce, reduce-scatter and all-gather timed as nccl-tests does (algbw, busbw),
        results checked; run it under mpirun for MPI ranks, else the ranks are threads.
  prepare-corpus OUTDIR [--wordnet DIR]
        Extracts the built-in WordNet corpus into OUTDIR/{train,valid,test}.txt.

A checkpoint DIR may be a checkpoint folder (runs/x/step_1200) or a run folder (runs/x: its
newest valid checkpoint). Exit codes: 0 success, 2 bad input (a recipe, flag or file) or a
resource the machine refused (memory, a device), 3 training stopped by non-finite or diverged losses
(the last good checkpoint is kept), 4 a data-parallel collective failed (a rank died, hung or
disagreed), 1 internal error (a bug in tarn).

Data-parallel training: launch the same command with mpirun, one rank per GPU or CPU node:
  mpirun -np 4 tarn train RECIPE.yaml          (training.device: cuda = each rank's local GPU)
training.tokens_per_batch stays the global batch; only rank 0 logs and writes (recipes/README.md).
)";

// Bounds of the numeric flags. A beam wider than 64 costs 64x the greedy decode for no gain a
// user could see on this model; a generated line of more than 65,536 tokens is a runaway;
// a batch of more than 2^24 padded tokens is far beyond any machine's memory for this model.
constexpr int64_t kMaxBeam = 64;
constexpr int64_t kMaxGenerateLength = 65536;
constexpr int64_t kMaxTokensPerBatch = int64_t{1} << 24;

// --flag value pairs, repeated --set, bare flags and positionals.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  std::vector<std::string> sets;

  std::string need(const std::string& flag) const {
    auto it = flags.find(flag);
    TARN_CHECK(it != flags.end(), "missing --", flag, " (see tarn --help)");
    return it->second;
  }
  std::string get(const std::string& flag, const std::string& fallback) const {
    auto it = flags.find(flag);
    return it == flags.end() ? fallback : it->second;
  }
  // The flag's integer, which must lie in [lo, hi]; `fallback` when the flag is absent.
  int64_t integer(const std::string& flag, int64_t fallback, int64_t lo, int64_t hi) const {
    auto it = flags.find(flag);
    if (it == flags.end()) return fallback;
    return parse_integer_flag(flag, it->second, lo, hi);
  }
  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
};

Args parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
           const std::vector<std::string>& bare) {
  Args a;
  for (int i = first; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool takes_value = name == "set" || std::find(valued.begin(), valued.end(), name) != valued.end();
    const bool is_bare = std::find(bare.begin(), bare.end(), name) != bare.end();
    TARN_CHECK(takes_value || is_bare, "unknown option --", name, " (see tarn --help)");
    TARN_CHECK(!is_bare || !inline_value, "--", name, " takes no value (got --", name, "=", value,
               "); leave it out to get the default");
    if (takes_value && !inline_value) {
      TARN_CHECK(i + 1 < argc, "--", name, " needs a value");
      value = argv[++i];
    }
    if (name == "set") a.sets.push_back(value);
    else a.flags[name] = value;
  }
  return a;
}

int cmd_train(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {}, {"restart"});
  TARN_CHECK(a.positional.size() == 1, "usage: tarn train RECIPE.yaml [--set KEY=VALUE ...] [--restart]");
  TrainOptions o;
  o.recipe_path = a.positional[0];
  o.overrides = a.sets;
  o.restart = a.has("restart");
  const TrainSummary s = train(o);
  return s.failed ? 3 : 0;
}

int cmd_config(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {}, {"keys"});
  if (a.has("keys")) {
    std::cout << recipe_help();
    return 0;
  }
  TARN_CHECK(a.positional.size() == 1, "usage: tarn config RECIPE.yaml [--set KEY=VALUE ...] | tarn config --keys");
  const Recipe r = load_recipe(a.positional[0], a.sets);
  for (const std::string& w : r.warnings) log::warn("config", w);
  check_memory(r);
  std::cout << to_yaml(r);
  return 0;
}

int cmd_eval(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {"checkpoint", "data", "tokens-per-batch", "max-batches"}, {});
  // Under mpirun the batches are shared out across the ranks (the one-rank figure, faster).
  std::unique_ptr<kernels::Communicator> comm;
  if (const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info(); launch.launched) {
    log::set_rank(launch.rank, launch.world);
    comm = kernels::mpi::world_communicator(300);
  }
  // The flags are checked before the checkpoint is loaded: a typo costs no loading time.
  const int64_t tokens_per_batch = a.integer("tokens-per-batch", 0, 1, kMaxTokensPerBatch);  // 0: the recipe's
  const int64_t max_batches = a.integer("max-batches", 0, 0, std::numeric_limits<int32_t>::max());
  const std::string data = a.need("data");
  TrainedModel l = load_trained_model(a.need("checkpoint"));
  auto ds = open_dataset(l.recipe, *l.tok, data, kEvalNoiseSeed, "eval");
  const EvalResult r = evaluate(*l.model, *ds, tokens_per_batch > 0 ? tokens_per_batch : l.recipe.training.tokens_per_batch,
                                max_batches, comm.get());
  if (comm && comm->rank() != 0) return 0;
  std::printf("nll %.6f\nppl %.4f\ntokens %lld\n", r.mean_nll(), r.perplexity(), static_cast<long long>(r.tokens));
  return 0;
}

int cmd_export(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {"checkpoint", "out"}, {});
  const ExportResult r = export_checkpoint(a.need("checkpoint"), a.need("out"));
  log::info("export", "wrote ", r.dir, ": model.safetensors (", r.tensors, " tensors, ", log::thousands(r.parameters),
            " values, ", log::thousands(static_cast<long long>(r.bytes)), " bytes, format checked), config.json, spm.model");
  return 0;
}

GenerateOptions generate_options(const Args& a) {
  GenerateOptions g;
  g.beam = static_cast<int>(a.integer("beam", 1, 1, kMaxBeam));
  g.max_length = a.integer("max-length", 128, 1, kMaxGenerateLength);
  g.no_repeat_ngram = static_cast<int>(a.integer("no-repeat-ngram", 0, 0, kMaxGenerateLength));
  return g;
}

int cmd_generate(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {"checkpoint", "beam", "max-length", "no-repeat-ngram"}, {});
  const GenerateOptions g = generate_options(a);
  TrainedModel l = load_trained_model(a.need("checkpoint"));
  const int64_t max_src = l.recipe.data.max_source_len;
  std::string line;
  int64_t lines = 0, truncated = 0;
  while (std::getline(std::cin, line)) {
    std::vector<int32_t> ids = l.tok->encode(line);
    if (static_cast<int64_t>(ids.size()) > max_src - 1) {
      ids.resize(static_cast<size_t>(max_src - 1));
      ++truncated;
    }
    ids.push_back(l.tok->eos_id());
    std::cout << l.tok->decode(generate(*l.model, {ids}, g).at(0)) << "\n" << std::flush;
    ++lines;
  }
  if (truncated) log::warn("generate", str_cat(truncated, " of ", lines, " lines were longer than data.max_source_len (",
                                               max_src, " tokens) and were truncated"));
  return 0;
}

int cmd_denoise(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {"checkpoint", "data", "count", "beam", "max-length", "no-repeat-ngram"}, {});
  const int64_t count = a.integer("count", 5, 0, std::numeric_limits<int32_t>::max());
  const GenerateOptions g = generate_options(a);
  const std::string data = a.need("data");
  TrainedModel l = load_trained_model(a.need("checkpoint"));
  TARN_CHECK(l.recipe.data.kind == "denoising", "denoise: the checkpoint was trained on ", l.recipe.data.kind,
             " data; use tarn generate");
  auto ds = open_dataset(l.recipe, *l.tok, data, kEvalNoiseSeed, "denoise");
  const int64_t n = std::min<int64_t>(count, static_cast<int64_t>(ds->size()));
  WordErrors errors;
  for (int64_t i = 0; i < n; ++i) {
    const Example ex = ds->example(static_cast<size_t>(i), 0);
    const std::vector<int32_t> out = generate(*l.model, {ex.source}, g).at(0);
    std::vector<int32_t> src(ex.source.begin(), ex.source.end() - 1);
    const std::string output = l.tok->decode(out), original = l.tok->decode(ex.target);
    std::printf("input:    %s\noutput:   %s\noriginal: %s\n\n", l.tok->decode(src).c_str(), output.c_str(),
                original.c_str());
    std::fflush(stdout);
    errors.add(output, original);
  }
  if (n > 0)
    log::info("denoise", n, " lines: word error rate ", log::number("%.3f", errors.rate()), " against the originals (",
              errors.edits, " word edits over ", errors.reference_words, " words)");
  return 0;
}

int cmd_prepare(int argc, char** argv) {
  const Args a = parse(argc, argv, 2, {"wordnet"}, {});
  TARN_CHECK(a.positional.size() == 1, "usage: tarn prepare-corpus OUTDIR [--wordnet DIR]");
  const auto corpus = prepare_wordnet_corpus(a.positional[0], a.get("wordnet", "/usr/share/wordnet"));
  log::info("data", corpus.summary());
  return 0;
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  // The benchmarks answer --help themselves, with their own flags.
  for (int i = 2; i < argc && std::strcmp(argv[1], "bench") != 0; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  const std::string cmd = argv[1];
  if (cmd == "train") return cmd_train(argc, argv);
  if (cmd == "config") return cmd_config(argc, argv);
  if (cmd == "eval") return cmd_eval(argc, argv);
  if (cmd == "export") return cmd_export(argc, argv);
  if (cmd == "generate") return cmd_generate(argc, argv);
  if (cmd == "denoise") return cmd_denoise(argc, argv);
  if (cmd == "prepare-corpus") return cmd_prepare(argc, argv);
  if (cmd == "bench") {
    constexpr const char* kWhich = "tarn bench attention | train | decode | collectives; see tarn --help";
    TARN_CHECK(argc >= 3, "bench: which one? (", kWhich, ")");
    const std::string what = argv[2];
    if (what == "attention") return bench_attention(argc - 2, argv + 2);
    if (what == "train") return bench_train(argc - 2, argv + 2);
    if (what == "decode") return bench_decode(argc - 2, argv + 2);
    TARN_CHECK(what == "collectives", "bench: unknown benchmark \"", what, "\" (", kWhich, ")");
    return bench_collectives(argc - 2, argv + 2);
  }
  throw Error("unknown command \"" + cmd + "\" (see tarn --help)");
}

}  // namespace
}  // namespace tarn::app

namespace {

// Under mpirun a rank that fails must take the whole job down (the others would wait in
// their next collective until the deadline): MPI_Abort. Alone, a plain exit code.
int finish(int code, const char* prefix = nullptr, const char* what = nullptr) {
  namespace mpi = tarn::kernels::mpi;
  if (what) {
    const tarn::kernels::mpi::LaunchInfo launch = mpi::launch_info();
    if (launch.launched)
      std::fprintf(stderr, "tarn: rank %d of %d: %s%s\n", launch.rank, launch.world, prefix, what);
    else
      std::fprintf(stderr, "tarn: %s%s\n", prefix, what);
    std::fflush(stderr);
    if (mpi::initialized()) mpi::abort(code);
  }
  mpi::finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return finish(tarn::app::dispatch(argc, argv));
  } catch (const tarn::ConfigError& e) {
    return finish(2, "", e.what());
  } catch (const tarn::kernels::mpi::CollectiveError& e) {
    return finish(4, "", e.what());
  } catch (const tarn::InternalError& e) {
    // A broken invariant is tarn's fault, not the input's: exit 1, and say so.
    const std::string what = std::string(e.what()) + " (a bug in tarn: please report it with the command that ran)";
    return finish(1, "internal error: ", what.c_str());
  } catch (const tarn::Error& e) {
    return finish(2, "", e.what());
  } catch (const std::exception& e) {
    return finish(1, "internal error: ", e.what());
  }
}
