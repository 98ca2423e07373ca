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

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

int64_t parse_integer_flag(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  TARN_CHECK(end && *end == '\0' && !text.empty(), "--", flag, ": expected an integer, got \"", text, "\"");
  TARN_CHECK(errno != ERANGE && v >= lo && v <= hi, "--", flag, ": ", text, " is out of range: it must be from ", lo,
             " to ", hi);
  return v;
}

bool asked_for_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(usage, stdout);
      return true;
    }
  return false;
}

BenchFlags::BenchFlags(const std::string& command, int argc, char** argv, const std::vector<std::string>& valued)
    : command_line_("tarn bench " + command) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    command_line_ += " " + s;
    if (s.rfind("--", 0) != 0) {
      positional_.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
    TARN_CHECK(std::find(valued.begin(), valued.end(), name) != valued.end(), "bench ", command,
               ": unknown option --", name, " (see tarn bench ", command, " --help)");
    if (eq == std::string::npos) {
      TARN_CHECK(i + 1 < argc, "bench ", command, ": --", name, " needs a value");
      value = argv[++i];
      command_line_ += " " + value;
    }
    values_[name] = value;
  }
}

std::string BenchFlags::text(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

int64_t BenchFlags::integer(const std::string& flag, int64_t fallback, int64_t lo, int64_t hi) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : parse_integer_flag(flag, it->second, lo, hi);
}

double BenchFlags::real(const std::string& flag, double fallback, double lo, double hi) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  TARN_CHECK(end && *end == '\0' && !it->second.empty() && std::isfinite(v), "--", flag,
             ": expected a number, got \"", it->second, "\"");
  TARN_CHECK(v >= lo && v <= hi, "--", flag, ": ", it->second, " is out of range: it must be from ", lo, " to ", hi);
  return v;
}

std::vector<int64_t> BenchFlags::integers(const std::string& flag, const std::vector<int64_t>& fallback, int64_t lo,
                                          int64_t hi) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(it->second)) out.push_back(parse_integer_flag(flag, item, lo, hi));
  TARN_CHECK(!out.empty(), "--", flag, ": expected a comma-separated list of integers, got \"", it->second, "\"");
  return out;
}

std::vector<std::string> BenchFlags::words(const std::string& flag, const std::vector<std::string>& fallback,
                                           const std::vector<std::string>& allowed) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  std::vector<std::string> out = split_commas(it->second);
  TARN_CHECK(!out.empty(), "--", flag, ": expected a comma-separated list, got \"", it->second, "\"");
  for (const std::string& w : out) {
    if (std::find(allowed.begin(), allowed.end(), w) != allowed.end()) continue;
    std::string choices;
    for (const std::string& a : allowed) choices += (choices.empty() ? "" : ", ") + a;
    TARN_CHECK(false, "--", flag, ": \"", w, "\" is not one of ", choices);
  }
  return out;
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

double bench_memory_budget(const BenchFlags& flags, Device device) {
  if (flags.has("max-gib")) return flags.real("max-gib", 0, 0.001, 1e6) * (1 << 30);
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

void BenchOutput::finish(const BenchFlags& flags, Device device) {
  if (dir_.empty()) return;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const kernels::BlasInfo blas = kernels::blas_info();
  json::Value meta = json::Value::object();
  meta.set("command", json::Value::string(flags.command_line()));
  meta.set("device", json::Value::string(device.str()));
  meta.set("cpu", json::Value::string(cpu_model_name()));
  meta.set("threads", json::Value::number(static_cast<int64_t>(kernels::num_threads())));
  meta.set("blas", json::Value::string(blas.str()));
  meta.set("sgemm_gflops", json::Value::number(measure_sgemm_gflops()));
  meta.set("date", json::Value::string(date));
  meta.set("load_average_1min", json::Value::number(load_average()));
  const std::string json_path = dir_ + "/" + name_ + ".json";
  std::ofstream out(json_path);
  out << meta.dump(2) << "\n";
  TARN_CHECK(static_cast<bool>(out), "--out: cannot write ", short_path(json_path));
  log::info("bench", "wrote ", csv_path_, " and ", json_path);
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
