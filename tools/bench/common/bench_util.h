#pragma once
// Shared by the benches: robust timing (median of repeats: the machines are shared, a busy core
// makes single runs 15-30x slower), and the two machine peaks every figure is quoted against,
// measured in the same process: sgemm GFLOP/s and streaming memory bandwidth.
#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>

namespace tarn::bench {

// The start of a bench's main: the faster BLAS kernels (kernels/blas_info.h; this may restart
// the process), then the command line `name` parsed the tarn way (tools/cli.h), `add_flags`
// declaring its flags. Returns the exit status when parsing ends the run (--help, a bad flag).
std::optional<int> start_bench(int argc, char** argv, const char* description, const char* name,
                               const std::function<void(CLI::App&)>& add_flags);
// The same for a bench whose one flag is --quick, which `quick_means` describes.
std::optional<int> start_bench(int argc, char** argv, const char* description, const char* name, bool& quick,
                               const char* quick_means);

struct Timing {
  double median_s = 0, min_s = 0, max_s = 0;
  int repeats = 0;
  // max/min above this suggests another process held a core during the run.
  bool looks_busy() const { return min_s > 0 && max_s / min_s > 2.0; }
};

// Runs fn once to warm up, then repeats until `min_total_s` has passed (at least `min_repeats`).
Timing time_it(const std::function<void()>& fn, double min_total_s = 0.3, int min_repeats = 5);

// Best sgemm GFLOP/s over a few square sizes (1024, 2048) with all threads.
double measure_sgemm_gflops();
// Copy bandwidth in GB/s (bytes read + written) on arrays far larger than the caches.
double measure_copy_gbps();

// Appends " (machine looked busy: max/min = X)" when the timing suggests so.
std::string busy_note(const Timing& t);

}  // namespace tarn::bench
