#include "tools/bench/common/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kernels/blas_info.h"
#include "kernels/gemm.h"
#include "kernels/memory.h"
#include "tools/cli.h"

namespace tarn::bench {

std::optional<int> start_bench(int argc, char** argv, const char* description, const char* name,
                               const std::function<void(CLI::App&)>& add_flags) {
  kernels::restart_with_better_blas_kernels(argv);
  CLI::App app(description, name);
  cli::configure(app);
  add_flags(app);
  return cli::parse(app, argc, argv);
}

std::optional<int> start_bench(int argc, char** argv, const char* description, const char* name, bool& quick,
                               const char* quick_means) {
  return start_bench(argc, argv, description, name, [&](CLI::App& app) { app.add_flag("--quick", quick, quick_means); });
}

Timing time_it(const std::function<void()>& fn, double min_total_s, int min_repeats) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: caches, page faults, allocator
  std::vector<double> t;
  double total = 0;
  while (static_cast<int>(t.size()) < min_repeats || total < min_total_s) {
    const auto start = clock::now();
    fn();
    const double s = std::chrono::duration<double>(clock::now() - start).count();
    t.push_back(s);
    total += s;
    if (t.size() >= 1000) break;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back(), static_cast<int>(t.size())};
}

double measure_sgemm_gflops() {
  double best = 0;
  for (int n : {1024, 2048}) {
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a), c(a.size());
    const Timing t = time_it([&] {
      kernels::cpu::gemm_batched(false, false, 1, n, n, n, 1.0f, a.data(), 0, b.data(), 0, 0.0f, c.data(), 0);
    }, 0.5, 3);
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) / t.median_s / 1e9);
  }
  return best;
}

double measure_copy_gbps() {
  const int64_t n = 64 << 20;  // 256 MiB per array: well past any cache
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
  const Timing t = time_it([&] { kernels::cpu::copy(b.data(), a.data(), n); }, 0.5, 3);
  return 2.0 * n * sizeof(float) / t.median_s / 1e9;
}

std::string busy_note(const Timing& t) {
  if (!t.looks_busy()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " (machine looked busy: max/min = %.1f)", t.max_s / t.min_s);
  return buf;
}

}  // namespace tarn::bench
