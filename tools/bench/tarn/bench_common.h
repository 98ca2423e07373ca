#pragma once
// What `tarn bench attention | train | decode` share: their flags, timing by median, the
// machine they ran on, and their output (a CSV, and beside it a JSON file naming the machine
// and the command, which tools/experiment/report.py turns into docs/experiment.md).
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/device.h"
#include "layers/config.h"
#include "tools/cli.h"

namespace tarn::app {

// The flags `tarn bench attention | train | decode` share, and the command line their report
// quotes.
struct BenchCommon {
  std::string command_line;  // "tarn bench attention --n 128,256"
  double max_gib = 0;        // --max-gib; 0: the default budget (bench_memory_budget)
  std::string out;           // --out; "": the CSV on stdout
};

// Adds `name` (attention, train, decode) to `tarn bench` with --max-gib, the memory `budget_of`
// may need, and --out, where NAME.csv and NAME.json go.
CLI::App* add_bench_command(CLI::App& bench, const std::string& name, const std::string& description,
                            BenchCommon& common, const std::string& budget_of);

// The bench `name` as a command: add_bench_command's flags, then those `add_flags` declares in
// `Flags` (which holds a BenchCommon `common`, quoting `command_line`); `run(flags)` does the work.
template <class Flags, class Run>
cli::Command bench_command(CLI::App& bench, const std::string& command_line, const std::string& name,
                           const std::string& description, const std::string& budget_of,
                           void (*add_flags)(CLI::App&, Flags&), Run run) {
  auto f = std::make_shared<Flags>();
  f->common.command_line = command_line;
  CLI::App* app = add_bench_command(bench, name, description, f->common, budget_of);
  add_flags(*app, *f);
  return {app, [f, run] { return run(*f); }};
}

// --device for a bench that runs a recipe: "cpu", "cuda" or "cuda:i", the recipe's
// training.device when not given.
void add_recipe_device_flag(CLI::App& app, std::string& device, const std::string& description);
// --device: "cpu" or "cuda[:i]", checked against this build and machine (exit 2 naming why not).
Device bench_device(const std::string& name);

// Median seconds of `fn` over at least `reps` runs and `min_time` seconds of runs (one untimed
// warm-up first, at most 100 runs). `sync` runs after each call (a device synchronisation).
double median_seconds(const std::function<void()>& fn, int reps, double min_time,
                      const std::function<void()>& sync = {});

// The process's peak resident memory (VmHWM) reset to its current size, so the next reading is
// the peak of what follows (Linux: /proc/self/clear_refs). False where the kernel refuses.
bool reset_resident_peak();

// Bytes one configuration of a bench may need on `device`: --max-gib, else 80% of this host's
// usable memory (CPU) or of what an H100/H200 leaves one process (no free-memory query reaches
// the backend table yet).
double bench_memory_budget(const BenchCommon& common, Device device);

// The recipe's model `cfg` with every attention stack of `kind`: "softmax"; "linear", which keeps
// `own` (the recipe's stack the bench is about) when it is linear, else elu(x) + 1; anything
// else leaves cfg as the recipe says.
BartConfig with_attention_kind(BartConfig cfg, const std::string& kind, const AttentionConfig& own);

// /proc/loadavg's 1-minute figure, -1 where it cannot be read: above the thread count, another
// process wanted the cores too and timings are low.
double load_average();

// Where a bench writes: OUT/<name>.csv and OUT/<name>.json with --out OUT, else the CSV on stdout.
class BenchOutput {
 public:
  BenchOutput(const std::string& out_dir, const std::string& name, const std::string& header);
  ~BenchOutput();
  // One CSV line (fields already formatted), flushed at once: a long sweep keeps what it measured.
  void row(const std::vector<std::string>& fields);
  // Writes the JSON beside the CSV (the command, device, CPU, threads, BLAS, sgemm GFLOP/s, date,
  // load), logs where both went and draws the bench's PNGs beside them (tools/experiment/report.py).
  void finish(const std::string& command_line, Device device);

 private:
  std::string dir_, name_, csv_path_;
  std::FILE* csv_ = nullptr;
  bool owned_ = false;
};

// The machine in one line for the log, and the sgemm speed measured now (1024^3, median): the
// yardstick every figure of a run is quoted against.
std::string cpu_model_name();
double measure_sgemm_gflops();

// "1.5 GiB", "0.000931 GiB": three significant digits, for the --max-gib messages.
std::string gibibytes(double bytes);

// A CSV number with `decimals` decimals; an empty field for NaN.
std::string csv_number(double v, int decimals = 3);

}  // namespace tarn::app
