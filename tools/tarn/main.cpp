// The tarn command line: each command's flags (CLI11, set up the tarn way by tools/cli.h) and
// the call into the library that does the work (app/; tools/bench/tarn/ for `tarn bench`).
// User errors (bad recipe, missing file, bad flag) exit 2 with a message naming the culprit;
// bugs exit 1; diverged training 3; a failed collective 4.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "data/denoising_dataset.h"
#include "data/wordnet_corpus.h"
#include "framework/config/config_error.h"
#include "framework/log/log.h"
#include "kernels/blas_info.h"
#include "kernels/mpi/mpi.h"
#include "layers/bart.h"
#include "tools/bench/tarn/bench_commands.h"
#include "tools/cli.h"
#include "app/checkpoint_state.h"
#include "app/evaluate.h"
#include "app/export.h"
#include "app/generate.h"
#include "app/hf_import.h"
#include "app/recipe/recipe.h"
#include "app/session.h"
#include "app/trained_model.h"
#include "app/trainer.h"
#include "app/word_errors.h"

namespace tarn {
const char* version_string();  // "tarn 0.1.0 (commit ...)", generated at build time (cmake/TarnVersion.cmake)
}  // namespace tarn

namespace tarn::app {
namespace {

constexpr const char* kDescription =
    "tarn: linear-attention BART training on CPUs and GPUs, one process or many (mpirun)";

constexpr const char* kFooter = R"(Run tarn COMMAND --help for a command's flags.

A checkpoint DIR may be a checkpoint folder (runs/x/step_1200) or a run folder (runs/x: its
newest valid checkpoint). Exit codes: 0 success, 2 bad input (a recipe, flag or file) or a
resource the machine refused (memory, a device), 3 training stopped by non-finite or diverged losses
(the last good checkpoint is kept), 4 a data-parallel collective failed (a rank died, hung or
disagreed), 1 internal error (a bug in tarn).

Data-parallel training: launch the same command with mpirun, one rank per GPU or CPU node:
  mpirun -np 4 tarn train RECIPE.yaml          (training.device: cuda = each rank's local GPU)
training.tokens_per_batch stays the global batch; only rank 0 logs and writes (recipes/README.md).)";

// Bounds of the numeric flags. A beam wider than 64 costs 64x the greedy decode for no gain a
// user could see on this model; a generated line of more than 65,536 tokens is a runaway;
// a batch of more than 2^24 padded tokens is far beyond any machine's memory for this model.
constexpr int64_t kMaxBeam = 64;
constexpr int64_t kMaxGenerateLength = 65536;
constexpr int64_t kMaxTokensPerBatch = int64_t{1} << 24;
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();

void add_overrides(CLI::App& app, std::vector<std::string>& overrides) {
  app.add_option("--set", overrides,
                 "override a recipe key, once per key: --set optimizer.lr=5e-4 (tarn config --keys lists them)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_checkpoint(CLI::App& app, std::string& dir) {
  app.add_option("--checkpoint", dir,
                 "a checkpoint folder (runs/x/step_1200) or a run folder (runs/x: its newest valid checkpoint)")
      ->type_name("DIR")
      ->required();
}

void add_data(CLI::App& app, std::string& path, const char* what) {
  app.add_option("--data", path, what)->type_name("FILE")->required();
}

// The command `name`: `Args` holds its flags and its description (kAbout); `add_flags` declares
// the flags, and `run` does the work once they are parsed.
template <class Args>
cli::Command command(CLI::App& tarn, const char* name, void (*add_flags)(CLI::App&, Args&), int (*run)(const Args&)) {
  auto o = std::make_shared<Args>();
  CLI::App* app = tarn.add_subcommand(name, Args::kAbout);
  add_flags(*app, *o);
  return {app, [o, run] { return run(*o); }};
}

void add_decoding_flags(CLI::App& app, GenerateOptions& g) {
  cli::add_integer(app, "--beam", g.beam, 1, kMaxBeam, "beam width; 1 is greedy decoding");
  cli::add_integer(app, "--max-length", g.max_length, 1, kMaxGenerateLength,
                   "longest output in tokens, at most the model's max_positions");
  cli::add_integer(app, "--no-repeat-ngram", g.no_repeat_ngram, 0, kMaxGenerateLength,
                   "never repeat an N-token sequence within one output; 0: off");
}

struct TrainArgs {
  TrainOptions options;
  static constexpr const char* kAbout =
      "Train from a recipe. Resumes from the newest valid checkpoint in\n"
      "checkpoints.dir unless --restart. Ctrl-C finishes the step, writes\n"
      "a checkpoint and exits.";
};

void add_train_flags(CLI::App& app, TrainArgs& o) {
  app.add_option("RECIPE.yaml", o.options.recipe_path, "the recipe (recipes/README.md)")->required();
  add_overrides(app, o.options.overrides);
  app.add_flag("--restart", o.options.restart, "start afresh: the old checkpoints move to previous_<time>/");
}

int run_train(const TrainArgs& a) { return train(a.options).failed ? 3 : 0; }

struct ConfigArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  bool keys = false;
  static constexpr const char* kAbout =
      "Validate a recipe and print it resolved, every default filled in;\n"
      "with --keys, every recipe key with its default, accepted values\n"
      "and description.";
};

void add_config_flags(CLI::App& app, ConfigArgs& o) {
  app.add_option("RECIPE.yaml", o.recipe, "the recipe to validate");
  add_overrides(app, o.overrides);
  app.add_flag("--keys", o.keys, "print every recipe key instead");
  app.callback([&o] {  // run inside parsing: reported as the other usage errors are
    if (!o.keys && o.recipe.empty()) throw CLI::RequiredError("RECIPE.yaml (or --keys)");
  });
}

int run_config(const ConfigArgs& a) {
  if (a.keys) {
    std::cout << recipe_help();
    return 0;
  }
  const Recipe r = load_recipe(a.recipe, a.overrides);
  for (const std::string& w : r.warnings) log::warn("config", w);
  check_memory(r);
  std::cout << to_yaml(r);
  return 0;
}

struct EvalArgs {
  std::string checkpoint, data;
  std::string data_kind;         // "": the checkpoint's data.kind
  int64_t tokens_per_batch = 0;  // 0: the recipe's
  int64_t max_batches = 0;       // 0: every batch
  static constexpr const char* kAbout =
      "Mean NLL and perplexity over the target tokens of FILE (the checkpoint's\n"
      "data kind unless --data-kind: denoising plain text, or source<TAB>target\n"
      "pairs). Under mpirun the ranks share the batches.";
};

int run_eval(const EvalArgs& a) {
  // Under mpirun the batches are shared out across the ranks (the one-rank figure, faster).
  std::unique_ptr<kernels::Communicator> comm;
  if (const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info(); launch.launched) {
    log::set_rank(launch.rank, launch.world);
    comm = kernels::mpi::world_communicator(300);
  }
  TrainedModel l = load_trained_model(a.checkpoint);
  if (!a.data_kind.empty()) l.recipe.data.kind = a.data_kind;
  auto ds = open_dataset(l.recipe, *l.tok, a.data, kEvalNoiseSeed, "eval");
  const EvalResult r = evaluate(*l.model, *ds, a.tokens_per_batch > 0 ? a.tokens_per_batch : l.recipe.training.tokens_per_batch,
                                a.max_batches, comm.get());
  if (comm && comm->rank() != 0) return 0;
  std::printf("nll %.6f\nppl %.4f\ntokens %lld\n", r.mean_nll(), r.perplexity(), static_cast<long long>(r.tokens));
  return 0;
}

void add_eval_flags(CLI::App& app, EvalArgs& o) {
  add_checkpoint(app, o.checkpoint);
  add_data(app, o.data, "the text to score");
  app.add_option("--data-kind", o.data_kind,
                 "pairs (source<TAB>target lines) or denoising (plain text, noised as in training)")
      ->check(CLI::IsMember({"pairs", "denoising"}))
      ->default_str("the checkpoint's data.kind");
  cli::add_integer(app, "--tokens-per-batch", o.tokens_per_batch, 1, kMaxTokensPerBatch, "padded tokens per batch")
      ->default_str("the recipe's training.tokens_per_batch");
  cli::add_integer(app, "--max-batches", o.max_batches, 0, kMaxCount, "score the first N batches only; 0: all of them");
}

cli::Command add_export(CLI::App& tarn) {
  auto checkpoint = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* app =
      tarn.add_subcommand("export",
                          "model.safetensors (HuggingFace BART names), config.json and spm.model\n"
                          "(byte-level BPE: tokenizer.json, vocab.json, merges.txt).");
  add_checkpoint(*app, *checkpoint);
  app->add_option("--out", *out, "the folder to write them to")->type_name("DIR")->required();
  return {app, [checkpoint, out] {
            const ExportResult r = export_checkpoint(*checkpoint, *out);
            log::info("export", "wrote ", r.dir, ": model.safetensors (", r.tensors, " tensors, ",
                      log::thousands(r.parameters), " values, ", log::thousands(static_cast<long long>(r.bytes)),
                      " bytes, format checked), config.json, the tokenizer");
            return 0;
          }};
}

struct GenerateArgs {
  std::string checkpoint;
  GenerateOptions g;
  static constexpr const char* kAbout = "Reads source lines on stdin, writes one generated line per source\non stdout.";
};

int run_generate(const GenerateArgs& a) {
  TrainedModel l = load_trained_model(a.checkpoint);
  const bool bos = l.recipe.data.bos;  // HF BART's <s> ... </s>, forced <s> and </s> (GenerateOptions)
  GenerateOptions g = a.g;
  g.forced_bos = g.forced_eos = bos;
  const int64_t max_src = l.recipe.data.max_source_len;
  const int64_t max_text = max_src - 1 - (bos ? 1 : 0);
  std::string line;
  int64_t lines = 0, truncated = 0;
  while (std::getline(std::cin, line)) {
    std::vector<int32_t> ids = l.tok->encode(line);
    if (static_cast<int64_t>(ids.size()) > max_text) {
      ids.resize(static_cast<size_t>(max_text));
      ++truncated;
    }
    if (bos) ids.insert(ids.begin(), l.tok->bos_id());
    ids.push_back(l.tok->eos_id());
    std::cout << l.tok->decode(generate(*l.model, {ids}, g).at(0)) << "\n" << std::flush;
    ++lines;
  }
  if (truncated) log::warn("generate", str_cat(truncated, " of ", lines, " lines were longer than data.max_source_len (",
                                               max_src, " tokens) and were truncated"));
  return 0;
}

void add_generate_flags(CLI::App& app, GenerateArgs& o) {
  add_checkpoint(app, o.checkpoint);
  add_decoding_flags(app, o.g);
}

struct DenoiseArgs {
  std::string checkpoint, data;
  int64_t count = 5;
  GenerateOptions g;
  static constexpr const char* kAbout =
      "Noises the first N lines of FILE as in training and shows input,\n"
      "output, original; then the word error rate of the outputs against\n"
      "the originals.";
};

int run_denoise(const DenoiseArgs& a) {
  TrainedModel l = load_trained_model(a.checkpoint);
  TARN_CHECK(l.recipe.data.kind == "denoising", "denoise: the checkpoint was trained on ", l.recipe.data.kind,
             " data; use tarn generate");
  auto ds = open_dataset(l.recipe, *l.tok, a.data, kEvalNoiseSeed, "denoise");
  GenerateOptions g = a.g;
  g.forced_bos = g.forced_eos = l.recipe.data.bos;
  const int64_t n = std::min<int64_t>(a.count, static_cast<int64_t>(ds->size()));
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

void add_denoise_flags(CLI::App& app, DenoiseArgs& o) {
  add_checkpoint(app, o.checkpoint);
  add_data(app, o.data, "plain text, one sentence or document per line");
  cli::add_integer(app, "--count", o.count, 0, kMaxCount, "lines to denoise");
  add_decoding_flags(app, o.g);
}

cli::Command add_import(CLI::App& tarn) {
  auto dir = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  CLI::App* app = tarn.add_subcommand(
      "import",
      "A HuggingFace BART folder (config.json, model.safetensors, tokenizer.json or\n"
      "vocab.json + merges.txt) as a tarn run folder: OUT/tokenizer.json and the\n"
      "checkpoint OUT/step_0, softmax attention, data.bos (HF's <s> ... </s>).\n"
      "config.json fields tarn cannot compute as HF does exit 2, naming them.");
  app->add_option("HF_DIR", *dir, "the folder save_pretrained wrote")->required();
  app->add_option("--out", *out, "the run folder to write")->type_name("DIR")->required();
  return {app, [dir, out] {
            const ImportResult r = import_hf_bart(*dir, *out);
            if (!r.not_applied.empty()) {
              std::string list;
              for (const std::string& n : r.not_applied) list += (list.empty() ? "" : ", ") + n;
              log::info("import", "not applied (generation defaults, labels, metadata: tarn generate takes --beam, "
                                  "--max-length, --no-repeat-ngram): ", list);
            }
            for (const std::string& n : r.notes) log::info("import", n);
            std::string dropped;
            for (const std::string& d : r.dropped) dropped += (dropped.empty() ? "" : ", ") + d;
            log::info("import", "wrote ", r.checkpoint, ": ", r.tensors, " tensors, ", log::thousands(r.parameters),
                      " values", dropped.empty() ? "" : "; copies of model.shared.weight not stored: ", dropped,
                      "; tokenizer from ", r.tokenizer_source);
            return 0;
          }};
}

cli::Command add_prepare_corpus(CLI::App& tarn) {
  auto out = std::make_shared<std::string>(), wordnet = std::make_shared<std::string>(kWordNetDir);
  CLI::App* app = tarn.add_subcommand("prepare-corpus",
                                      "Extracts the built-in WordNet corpus into\n"
                                      "OUTDIR/{train,valid,test}.txt.");
  app->add_option("OUTDIR", *out, "the folder to write")->required();
  app->add_option("--wordnet", *wordnet, "WordNet 3.0's dict folder (Debian's wordnet-base)")->type_name("DIR");
  return {app, [out, wordnet] {
            log::info("data", prepare_wordnet_corpus(*out, *wordnet).summary());
            return 0;
          }};
}

int dispatch(int argc, char** argv) {
  CLI::App tarn(kDescription, "tarn");
  cli::configure(tarn);
  tarn.set_version_flag("--version", std::string(version_string()), "print the version and the commit built, and exit");
  tarn.require_subcommand(1);
  std::vector<cli::Command> commands = {command(tarn, "train", add_train_flags, run_train),
                                        command(tarn, "config", add_config_flags, run_config),
                                        command(tarn, "eval", add_eval_flags, run_eval),
                                        add_export(tarn),
                                        command(tarn, "generate", add_generate_flags, run_generate),
                                        command(tarn, "denoise", add_denoise_flags, run_denoise),
                                        add_import(tarn)};
  CLI::App* bench =
      tarn.add_subcommand("bench", "Benchmarks: attention, train, decode, collectives (tarn bench --help).");
  bench->require_subcommand(1);
  std::string command_line = "tarn";  // quoted in the benches' reports
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  for (cli::Command c : {add_bench_attention(*bench, command_line), add_bench_train(*bench, command_line),
                         add_bench_decode(*bench, command_line), add_bench_collectives(*bench)})
    commands.push_back(c);
  commands.push_back(add_prepare_corpus(tarn));
  tarn.footer(kFooter);  // after the commands: CLI11 would copy it into each

  if (argc < 2) {
    std::cerr << tarn.help();
    return 2;
  }
  // `tarn help [COMMAND ...]` is `tarn [COMMAND ...] --help`.
  std::vector<const char*> args(argv, argv + argc);
  if (std::string(args[1]) == "help") {
    args.erase(args.begin() + 1);
    args.push_back("--help");
  }
  if (const std::optional<int> status = cli::parse(tarn, static_cast<int>(args.size()), args.data())) return *status;
  for (const cli::Command& c : commands)
    if (c.app->parsed()) return c.run();
  TARN_ASSERT(false, "no command ran although the command line parsed");
  return 1;
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
  tarn::kernels::restart_with_better_blas_kernels(argv);  // before MPI, threads or files
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
