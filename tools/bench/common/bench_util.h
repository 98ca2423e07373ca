#pragma once
// Shared by the benches: robust timing (median of repeats: the machines are shared, a busy core
// makes single runs 15-30x slower), and the two machine peaks every figure is quoted against,
// measured in the same process: sgemm GFLOP/s and streaming memory bandwidth.
#include <functional>
#include <string>

namespace tarn::bench {

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
