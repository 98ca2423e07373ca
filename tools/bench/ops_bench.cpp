// Memory-bound op kernels against the memory bandwidth measured in the same run
// (OMP_NUM_THREADS=<n> ops_bench [--quick]); `ops_bench --help` says what the figures are.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/blas_info.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/layer_norm.h"
#include "kernels/parallel.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
#include "tools/bench/common/bench_util.h"
#include "tools/cli.h"

namespace {

constexpr const char* kDescription = R"(Memory-bound op kernels against the memory bandwidth measured in the same run
(run as OMP_NUM_THREADS=<n> ops_bench [--quick]: about 10 s).

Prints CSV: one row per (kernel, pass, shape) with the bytes a perfect implementation must
move (each input read once, each output written once; write-allocate traffic not counted,
as STREAM does not count it), the best time, GB/s, and the ratio to the STREAM-like copy
bandwidth measured in the same run (before the kernels, and again after them). Repetitions
rotate over slices of 256 MiB buffers, so that the data comes from DRAM as it would inside a
training step, not from a cache warmed by the previous repetition. Shapes are
transformer-sized: 8192 tokens by width 256 / 1024 (d_model, FFN) and 8000 (a vocabulary).)";

namespace k = tarn::kernels::cpu;

constexpr int64_t kTokens = 8192;
constexpr int64_t kStreamFloats = int64_t{1} << 25;  // 128 MiB per array: far past any cache
constexpr double kMinSeconds = 0.25;                  // time budget per measurement
constexpr int kMinReps = 3, kMaxReps = 200;  // many short runs: one of them escapes the neighbours

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Best (minimum) seconds of one call of fn(rep) after one warm-up call, as STREAM reports: on
// a shared machine the minimum is the run least disturbed by other processes.
double time_best(const std::function<void(int)>& fn, double min_seconds) {
  fn(0);
  std::vector<double> t;
  const double start = now();
  while (static_cast<int>(t.size()) < kMinReps || (now() - start < min_seconds && static_cast<int>(t.size()) < kMaxReps)) {
    const double t0 = now();
    fn(static_cast<int>(t.size()) + 1);
    t.push_back(now() - t0);
  }
  return *std::min_element(t.begin(), t.end());
}

// Buffers touched in parallel first, so that pages are not all faulted in by one thread.
std::vector<float> buffer(int64_t n, float value) {
  std::vector<float> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = value + 1e-3f * static_cast<float>(i % 1000);
  return v;
}

double g_copy_gbs = 0;

void row(const char* kernel, const char* pass, int64_t rows, int64_t cols, double bytes, double seconds) {
  const double gbs = bytes / seconds / 1e9;
  std::printf("%s,%s,%lld,%lld,%.1f,%.3f,%.2f,%.2f\n", kernel, pass, static_cast<long long>(rows),
              static_cast<long long>(cols), bytes / 1e6, seconds * 1e3, gbs, g_copy_gbs > 0 ? gbs / g_copy_gbs : 1.0);
  std::fflush(stdout);
}

// STREAM-like copy and triad over arrays far larger than the caches. `tag` names the pass
// ("before" / "after" the kernels): on a shared machine the two can differ, and the ratio
// column uses the best copy figure seen so far.
void stream(const char* tag, double min_seconds) {
  std::vector<float> a = buffer(kStreamFloats, 1.0f), b = buffer(kStreamFloats, 2.0f), c = buffer(kStreamFloats, 3.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  const int64_t n = kStreamFloats;
  const double copy = time_best([&](int) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i];
  }, min_seconds);
  g_copy_gbs = std::max(g_copy_gbs, 2.0 * n * sizeof(float) / copy / 1e9);
  row("stream_copy", tag, 1, n, 2.0 * n * sizeof(float), copy);
  const float s = 0.5f;
  const double triad = time_best([&](int) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  }, min_seconds);
  row("stream_triad", tag, 1, n, 3.0 * n * sizeof(float), triad);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  if (const std::optional<int> status = tarn::bench::start_bench(argc, argv, kDescription, "ops_bench", quick,
                                                                 "0.02 s of repetitions per figure instead of 0.25 s"))
    return *status;
  const double min_seconds = quick ? 0.02 : kMinSeconds;
  std::printf("# ops_bench: %d OpenMP threads; GB/s = minimal bytes moved / best time; ratio = GB/s / stream_copy GB/s\n",
              tarn::kernels::num_threads());
  std::printf("kernel,pass,rows,cols,MB,ms,GB_per_s,ratio_to_copy\n");
  stream("before", min_seconds);

  // Four 256 MiB buffers. A call on an n-element tensor works on slot (rep mod slots) of them,
  // so consecutive repetitions touch different memory and read from DRAM rather than from a
  // warm L3 (which on this VM may be far larger than the 32 MiB it reports).
  const int64_t max_n = kTokens * 8000;
  std::vector<float> xb = buffer(max_n, -1.0f), yb = buffer(max_n, 0.0f), dyb = buffer(max_n, 0.5f),
                     dxb = buffer(max_n, 0.0f);
  std::vector<float> gamma = buffer(8000, 1.0f), beta = buffer(8000, 0.0f), dgamma(8000), dbeta(8000);
  std::vector<float> mean(kTokens), rstd(kTokens), lse(kTokens);
  std::vector<int32_t> targets(kTokens);
  for (int64_t r = 0; r < kTokens; ++r) targets[r] = r % 10 == 0 ? -100 : static_cast<int32_t>((r * 7919) % 8000);
  const double f = sizeof(float);
  struct Slot {
    float *x, *y, *dy, *dx;
  };
  auto slot = [&](int64_t n, int rep) {
    const int64_t off = (rep % std::max<int64_t>(1, max_n / n)) * n;
    return Slot{xb.data() + off, yb.data() + off, dyb.data() + off, dxb.data() + off};
  };

  for (int64_t cols : {int64_t{256}, int64_t{1024}}) {
    const int64_t rows = kTokens, n = rows * cols;
    row("layer_norm", "forward", rows, cols, 2 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::layer_norm_forward(s.x, gamma.data(), beta.data(), s.y, mean.data(), rstd.data(), rows, cols, 1e-5f);
        }, min_seconds));
    row("layer_norm", "backward", rows, cols, 3 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::layer_norm_backward(s.x, s.dy, gamma.data(), mean.data(), rstd.data(), s.dx, dgamma.data(), dbeta.data(),
                                 rows, cols);
        }, min_seconds));
  }

  for (int64_t cols : {int64_t{256}, int64_t{1024}, int64_t{8000}}) {
    const int64_t rows = kTokens, n = rows * cols;
    row("softmax", "forward", rows, cols, 2 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::softmax_forward(s.x, s.y, rows, cols);
        }, min_seconds));
    row("softmax", "backward", rows, cols, 3 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::softmax_backward(s.y, s.dy, s.dx, rows, cols);
        }, min_seconds));
  }

  for (int64_t cols : {int64_t{1024}, int64_t{4096}}) {
    const int64_t rows = kTokens, n = rows * cols;
    for (k::Gelu kind : {k::Gelu::exact, k::Gelu::tanh}) {
      const char* name = kind == k::Gelu::exact ? "gelu_exact" : "gelu_tanh";
      row(name, "forward", rows, cols, 2 * n * f, time_best([&](int rep) {
            const Slot s = slot(n, rep);
            k::gelu_forward(kind, s.x, s.y, n);
          }, min_seconds));
      row(name, "backward", rows, cols, 3 * n * f, time_best([&](int rep) {
            const Slot s = slot(n, rep);
            k::gelu_backward(kind, s.x, s.dy, s.dx, n);
          }, min_seconds));
    }
  }

  for (int64_t cols : {int64_t{256}, int64_t{1024}}) {
    const int64_t rows = kTokens, n = rows * cols;
    row("add_bias", "forward", rows, cols, 2 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::binary_row(k::Binary::add, s.x, gamma.data(), s.y, rows, cols);
        }, min_seconds));
    // d(bias) = column sums of dy; d(x) = dy is passed through without a copy.
    row("add_bias", "backward", rows, cols, n * f, time_best([&](int rep) {
          k::sum_axis(slot(n, rep).dy, dgamma.data(), 1, rows, cols);
        }, min_seconds));
  }

  {
    const int64_t rows = kTokens, cols = 8000, n = rows * cols;
    row("cross_entropy", "forward", rows, cols, n * f, time_best([&](int rep) {
          k::cross_entropy_forward(slot(n, rep).x, targets.data(), rows, cols, -100, 0.1f, lse.data());
        }, min_seconds));
    row("cross_entropy", "backward", rows, cols, 2 * n * f, time_best([&](int rep) {
          const Slot s = slot(n, rep);
          k::cross_entropy_backward(s.x, targets.data(), lse.data(), rows, cols, -100, 0.1f, 1e-4f, s.dx);
        }, min_seconds));
  }
  stream("after", min_seconds);
  std::printf("# best stream_copy: %.2f GB/s\n", g_copy_gbs);
  return 0;
}
