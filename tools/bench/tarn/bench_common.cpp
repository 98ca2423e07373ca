#include "tools/bench/tarn/bench_common.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include "framework/io/json.h"
#include "framework/log/log.h"
#include "kernels/backend.h"
#include "kernels/blas_info.h"
#include "kernels/check.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "app/session.h"

namespace tarn::app {
namespace {

// The bench's PNGs beside its CSV, drawn by tools/experiment/report.py --only NAME with Debian's
// /usr/bin/python3 (where tools/setup.sh installs python3-matplotlib; another python3 on the PATH
// need not have it), else the PATH's python3. Drawing is a convenience: a machine without them
// keeps the CSV and JSON and gets a warning, and the bench still succeeds.
void draw_plots(const std::string& dir, const std::string& name) {
  const char* env = std::getenv("TARN_REPORT_SCRIPT");
  const std::string script = env != nullptr && *env != '\0' ? env : TARN_SOURCE_DIR "/tools/experiment/report.py";
  if (!std::filesystem::exists(script)) {
    log::warn("bench", str_cat("no PNG: ", script, " not found (set TARN_REPORT_SCRIPT to tools/experiment/report.py)"));
    return;
  }
  const char* python = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::fflush(nullptr);  // the child must not write this process's buffered output again
  const pid_t pid = fork();
  if (pid == 0) {
    execlp(python, python, script.c_str(), "--in", dir.c_str(), "--only", name.c_str(), static_cast<char*>(nullptr));
    _exit(127);  // no python3
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    log::warn("bench", str_cat("no PNG: cannot start python3: ", std::strerror(errno)));
    return;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    log::warn("bench", str_cat("no PNG: ", python, " ", short_path(script), " exited with ",
                               WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                               " (127: no python3; otherwise see above; tools/setup.sh installs python3-matplotlib)"));
}

}  // namespace

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

CLI::App* add_bench_command(CLI::App& bench, const std::string& name, const std::string& description,
                            BenchCommon& common, const std::string& budget_of) {
  CLI::App* app = bench.add_subcommand(name, description);
  cli::add_real(*app, "--max-gib", common.max_gib, 0.001, 1e6, "memory " + budget_of + " may need, in GiB", "G")
      ->default_str("80% of this machine's memory, or of the GPU's free memory on cuda");
  app->add_option("--out", common.out,
                  "write DIR/" + name + ".csv and DIR/" + name + ".json, and draw DIR/" + name +
                      "_*.png (tools/experiment/report.py; needs python3-matplotlib)")
      ->type_name("DIR")
      ->default_str("the CSV on stdout");
  return app;
}

void add_recipe_device_flag(CLI::App& app, std::string& device, const std::string& description) {
  app.add_option("--device", device, description)->type_name("D")->default_str("the recipe's training.device");
}

Device bench_device(const std::string& name) {
  Device device;
  try {
    device = Device::parse(name);
  } catch (const Error& e) {
    TARN_CHECK(false, "--device: ", e.what());
  }
  if (device.is_cpu()) return device;
  try {
    kernels::cuda_backend();  // throws "no CUDA device: ..." with the reason
  } catch (const Error& e) {
    TARN_CHECK(false, "--device ", name, ": ", e.what());
  }
  TARN_CHECK(device.index < kernels::cuda_device_count(), "--device ", name, ": no CUDA device ", device.index, " (",
             kernels::cuda_device_count(), " visible)");
  return device;
}

double median_seconds(const std::function<void()>& fn, int reps, double min_time, const std::function<void()>& sync) {
  fn();
  if (sync) sync();
  std::vector<double> times;
  double spent = 0;
  while ((static_cast<int>(times.size()) < reps || spent < min_time) && times.size() < 100) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    if (sync) sync();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    spent += times.back();
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

bool reset_resident_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // 5: reset the peak resident set size (VmHWM) to the current size
  out.flush();
  return static_cast<bool>(out);
}

double bench_memory_budget(const BenchCommon& common, Device device) {
  if (common.max_gib > 0) return common.max_gib * (1 << 30);
  return 0.8 * device_memory_bytes(device);
}

BartConfig with_attention_kind(BartConfig cfg, const std::string& kind, const AttentionConfig& own) {
  if (kind == "softmax") return cfg.with_attention(AttentionConfig::softmax_attention());
  if (kind == "linear") return cfg.with_attention(own.is_linear() ? own : AttentionConfig::linear_attention());
  return cfg;
}

BenchOutput::BenchOutput(const std::string& out_dir, const std::string& name, const std::string& header)
    : dir_(out_dir), name_(name) {
  if (dir_.empty()) {
    csv_ = stdout;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    TARN_CHECK(!ec, "--out ", short_path(dir_), ": cannot create the folder: ", ec.message());
    csv_path_ = dir_ + "/" + name + ".csv";
    csv_ = std::fopen(csv_path_.c_str(), "w");
    TARN_CHECK(csv_ != nullptr, "--out: cannot write ", short_path(csv_path_), ": ", std::strerror(errno));
    owned_ = true;
  }
  std::fprintf(csv_, "%s\n", header.c_str());
  std::fflush(csv_);
}

BenchOutput::~BenchOutput() {
  if (owned_) std::fclose(csv_);
}

void BenchOutput::row(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\n") == std::string::npos) {
      line += f;
      continue;
    }
    line += '"';  // RFC 4180: a field with a comma or quote is quoted, its quotes doubled
    for (char c : f) line += c == '"' ? std::string("\"\"") : std::string(1, c);
    line += '"';
  }
  std::fprintf(csv_, "%s\n", line.c_str());
  std::fflush(csv_);
}

void BenchOutput::finish(const std::string& command_line, Device device) {
  if (dir_.empty()) return;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const kernels::BlasInfo blas = kernels::blas_info();
  json::Json meta = json::Json::object();
  meta["command"] = command_line;
  meta["device"] = device.str();
  meta["cpu"] = cpu_model_name();
  meta["threads"] = static_cast<int64_t>(kernels::num_threads());
  meta["blas"] = blas.str();
  meta["sgemm_gflops"] = measure_sgemm_gflops();
  meta["date"] = date;
  meta["load_average_1min"] = load_average();
  const std::string json_path = dir_ + "/" + name_ + ".json";
  std::ofstream out(json_path);
  out << json::dump(meta, 2) << "\n";
  TARN_CHECK(static_cast<bool>(out), "--out: cannot write ", short_path(json_path));
  log::info("bench", "wrote ", csv_path_, " and ", json_path);
  draw_plots(dir_, name_);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double measure_sgemm_gflops() {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double s = median_seconds(
      [&] { kernels::cpu::gemm_batched(false, false, 1, n, n, n, 1.0f, a.data(), 0, b.data(), 0, 0.0f, c.data(), 0); },
      5, 0.3);
  return 2.0 * n * n * n / s / 1e9;
}

std::string gibibytes(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1 << 30));
  return buf;
}

std::string csv_number(double v, int decimals) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace tarn::app
