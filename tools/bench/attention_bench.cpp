// Attention benchmark: causal linear, bidirectional linear and softmax attention, forward and
// forward+backward, against sequence length N and B*H, with the sgemm speed of this machine
// measured in the same process as the yardstick. CSV on stdout, notes on stderr.
// `attention_bench --help` gives the flags and what the figures are (kDescription below).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/ops/attention.h"
#include "kernels/blas_info.h"
#include "kernels/cpu/linear_attention_simd.h"
#include "kernels/linear_attention.h"
#include "kernels/softmax_attention.h"
#include "tools/bench/common/bench_util.h"
#include "tools/cli.h"

namespace {

namespace k = tarn::kernels::cpu;
using Clock = std::chrono::steady_clock;

constexpr const char* kDescription = R"(Causal linear, bidirectional linear and softmax attention, forward and
forward+backward, against sequence length N and B*H, with the sgemm speed of this machine
measured in the same process as the yardstick. CSV on stdout, notes on stderr.

It times the Tensor ops of framework/ops/attention.h, as a model calls them: linear
attention with the feature map fused into the kernel (--unfused: feature_map() ops first),
and softmax attention (causal for --algos softmax). Forward runs under NoGradGuard;
forward+backward is the op plus out.backward(dO). Each time is the median of at least
--reps runs and of as many as fit in --min-time seconds. Peak memory comes from
tarn::memory_stats() (reset before the step, with Q, K, V and dO already allocated), and
is also given as a multiple of the bytes of (Q, K, V, O, dO, dQ, dK, dV).
--cold evicts the caches before every timed run (writes a 256 MiB buffer, untimed), as a
training step meets the attention inputs: without it, repeats at N <= 1K find Q, K, V
already in L2 and time per token looks lower than at long N, where they stream from memory.
GFLOP/s use the FLOP formulas of kernels/linear_attention.h and softmax_attention.h.)";

struct Options {
  int64_t n_min = 256, n_max = 65536, softmax_n_max = 8192;
  std::vector<int64_t> n_list;  // --n: explicit lengths instead of the doubling sweep
  std::vector<int64_t> bh = {4, 8, 32};
  int64_t d = 64, e = 64;
  int chunk = 64;
  std::vector<std::string> algos = {"causal", "bidir", "softmax"};
  double min_time = 0.3;
  int reps = 3;
  std::string map_name = "elu1";
  k::FeatureMap map = k::FeatureMap::elu1;  // from map_name
  bool unfused = false;
  bool cold = false;
  double max_gib = 12.0;  // skip configurations whose buffers exceed this
};

void add_flags(CLI::App& app, Options& o) {
  constexpr int64_t kMaxN = int64_t{1} << 24;
  tarn::cli::add_integer(app, "--n-min", o.n_min, 1, kMaxN, "shortest N of the doubling sweep");
  tarn::cli::add_integer(app, "--n-max", o.n_max, 1, kMaxN, "longest N of the sweep");
  tarn::cli::add_list(app, "--n", o.n_list, "these lengths instead of the sweep", tarn::cli::integer(1, kMaxN));
  tarn::cli::add_list(app, "--bh", o.bh, "batch x heads", tarn::cli::integer(1, 1 << 20));
  tarn::cli::add_integer(app, "--d", o.d, 1, 4096, "query and key dimension", "D");
  tarn::cli::add_integer(app, "--e", o.e, 1, 4096, "value dimension", "E");
  tarn::cli::add_integer(app, "--chunk", o.chunk, 1, 4096, "rows per chunk of the causal scan", "C");
  tarn::cli::add_list(app, "--algos", o.algos, "causal and bidir(ectional) linear attention, causal softmax",
                      tarn::cli::one_of({"causal", "bidir", "softmax"}));
  tarn::cli::add_integer(app, "--softmax-n-max", o.softmax_n_max, 1, kMaxN, "longest N timed for softmax (quadratic)");
  tarn::cli::add_real(app, "--min-time", o.min_time, 0, 3600, "seconds of timed runs per figure at least", "S");
  tarn::cli::add_integer(app, "--reps", o.reps, 1, 1000, "timed runs per figure at least");
  app.add_option("--map", o.map_name, "the feature map (favor is not benchmarked here)")
      ->type_name("MAP")
      ->check(tarn::cli::one_of({"elu1", "relu", "exp", "identity"}));
  app.add_flag("--unfused", o.unfused, "apply the feature map as separate ops, not inside the kernel");
  app.add_flag("--cold", o.cold, "evict the caches before every timed run");
  tarn::cli::add_real(app, "--max-gib", o.max_gib, 0.001, 1e6, "skip configurations whose buffers exceed this", "G");
}

bool g_cold = false;  // --cold

// Pushes everything else out of L1-L3 by writing (and reading back) a buffer larger than them.
void evict_caches() {
  static std::vector<float> junk(64u << 20);
  static float sink = 0.0f;
  for (size_t i = 0; i < junk.size(); i += 16) junk[i] = sink + 1.0f;
  for (size_t i = 0; i < junk.size(); i += 16) sink += junk[i] * 1e-9f;
}

// Median seconds of fn over at least `reps` runs and `min_time` seconds (one warm-up first;
// the time spent evicting caches under --cold is not counted).
double time_median(const std::function<void()>& fn, int reps, double min_time) {
  fn();
  std::vector<double> times;
  double measured = 0.0;
  while (static_cast<int>(times.size()) < reps || measured < min_time) {
    if (g_cold) evict_caches();
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    measured += times.back();
    if (times.size() >= 200) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// ---- the yardstick ----

struct Yardstick {
  double sgemm_big = 0, sgemm_chunk_blas = 0, sgemm_chunk_tile = 0;
};

Yardstick measure_sgemm(const Options& o) {
  Yardstick y;
  {
    const int n = 1024;
    std::vector<float> a = random_floats(n * n, 1), b = random_floats(n * n, 2), c(n * n);
    const double t = time_median(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                      b.data(), n, 0.0f, c.data(), n);
        },
        5, 0.5);
    y.sgemm_big = 2.0 * n * n * n / t / 1e9;
  }
  // The chunk products' shape (C x d times d x (e+1)), one per thread inside a parallel
  // region as the kernel runs them: OpenBLAS single-threaded vs the kernel's tile GEMM.
  const int C = o.chunk, d = static_cast<int>(o.d), e1 = static_cast<int>(o.e + 1);
  const int ep = static_cast<int>(k::simd::padded(e1));
  const int iters = 2000, threads = omp_get_max_threads();
  std::vector<float> a = random_floats(C * d, 3), b = random_floats(d * ep, 4);
  auto run = [&](bool blas) {
    return time_median(
        [&] {
#pragma omp parallel num_threads(threads)
          {
            std::vector<float> c(C * ep);
            for (int i = 0; i < iters; ++i) {
              if (blas)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, C, e1, d, 1.0f, a.data(),
                            d, b.data(), ep, 1.0f, c.data(), ep);
              else
                k::simd::gemm(C, ep, d, k::simd::rows_of(a.data(), d), b.data(), ep, c.data(),
                              ep, true);
            }
          }
        },
        3, 0.2);
  };
  const double flops = 2.0 * C * d * e1 * iters * threads;
  y.sgemm_chunk_blas = flops / run(true) / 1e9;
  y.sgemm_chunk_tile = flops / run(false) / 1e9;  // counts e+1 columns, computes padded ep
  return y;
}

// ---- one configuration ----

struct Result {
  double fwd_s = 0, fwdbwd_s = 0, fwd_flops = 0, bwd_flops = 0;
  int64_t fwd_peak = 0, fwdbwd_peak = 0;  // bytes, from the allocator
  double tensors_bytes = 0;               // (Q, K, V, O, dO, dQ, dK, dV)
};

tarn::Tensor random_tensor(const tarn::Shape& shape, uint32_t seed, bool grad) {
  tarn::Tensor t = tarn::Tensor::empty(shape);
  const std::vector<float> x = random_floats(static_cast<size_t>(t.numel()), seed);
  std::copy(x.begin(), x.end(), t.f32());
  if (grad) t.set_requires_grad(true);
  return t;
}

// Times `op` forward (no graph) and forward+backward, and measures the peak of each.
template <class Op>
void measure(const Options& o, int reps, double min_time, Op op, tarn::Tensor* inputs,
             const tarn::Tensor& dout, Result& r) {
  auto fwd = [&] {
    tarn::NoGradGuard no_grad;
    op();
  };
  auto fwdbwd = [&] {
    op().backward(dout);
    for (int i = 0; i < 3; ++i) inputs[i].zero_grad();
  };
  r.fwd_s = time_median(fwd, reps, min_time);
  r.fwdbwd_s = time_median(fwdbwd, reps, min_time);
  tarn::reset_peak_memory();
  fwd();
  r.fwd_peak = tarn::memory_stats().peak_bytes;
  tarn::reset_peak_memory();
  fwdbwd();
  r.fwdbwd_peak = tarn::memory_stats().peak_bytes;
}

// One configuration's operands, the same for every algorithm: q (or a), k (or b) (1, BH, N, d)
// and v (1, BH, N, e), each with a gradient, and the output's gradient dout (1, BH, N, e).
struct Operands {
  tarn::Tensor in[3];
  tarn::Tensor dout;
};

Operands random_operands(const Options& o, int64_t bh, int64_t n) {
  return {{random_tensor({1, bh, n, o.d}, 5, true), random_tensor({1, bh, n, o.d}, 6, true),
           random_tensor({1, bh, n, o.e}, 7, true)},
          random_tensor({1, bh, n, o.e}, 8, false)};
}

// The FLOPs of forward and backward at `dims`, as the kernel counts them, and the bytes of the
// eight tensors (Q, K, V, O, dO, dQ, dK, dV).
template <class Dims, class Config>
void count_work(const Dims& dims, const Config& cfg, double (*flops)(const Dims&, const Config&, bool), Result& r) {
  r.fwd_flops = flops(dims, cfg, false);
  r.bwd_flops = flops(dims, cfg, true);
  r.tensors_bytes = 4.0 * sizeof(float) * dims.heads * dims.n_q * (dims.d + dims.e);
}

Result run_linear(const Options& o, int64_t bh, int64_t n, bool causal) {
  Operands x = random_operands(o, bh, n);
  tarn::LinearAttentionOptions opt;
  opt.causal = causal;
  opt.chunk = o.chunk;
  if (!o.unfused) opt.fused_feature_map = o.map;
  auto op = [&] {
    if (!o.unfused) return tarn::linear_attention(x.in[0], x.in[1], x.in[2], opt);
    return tarn::linear_attention(tarn::feature_map(x.in[0], o.map),
                                  tarn::feature_map(x.in[1], o.map, tarn::FeatureRole::key), x.in[2],
                                  opt);
  };
  Result r;
  measure(o, o.reps, o.min_time, op, x.in, x.dout, r);
  k::LinearAttentionConfig cfg;
  cfg.causal = causal;
  cfg.chunk = o.chunk;
  count_work(k::LinearAttentionDims{1, bh, n, n, o.d, o.e}, cfg, &k::linear_attention_flops, r);
  return r;
}

Result run_softmax(const Options& o, int64_t bh, int64_t n) {
  Operands x = random_operands(o, bh, n);
  tarn::SoftmaxAttentionOptions opt;
  opt.causal = true;
  auto op = [&] { return tarn::softmax_attention(x.in[0], x.in[1], x.in[2], opt); };
  Result r;
  // Softmax is quadratic: one run each beyond 4K keeps the whole sweep within minutes.
  measure(o, n > 4096 ? 1 : o.reps, n > 4096 ? 0.0 : o.min_time, op, x.in, x.dout, r);
  k::SoftmaxAttentionConfig cfg;
  cfg.causal = true;
  count_work(k::SoftmaxAttentionDims{1, bh, n, n, o.d, o.e}, cfg, &k::softmax_attention_flops, r);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const std::optional<int> status =
          tarn::bench::start_bench(argc, argv, kDescription, "attention_bench", [&](CLI::App& app) { add_flags(app, o); }))
    return *status;
  o.map = tarn::parse_feature_map(o.map_name);
  const Yardstick y = measure_sgemm(o);  // the yardstick always runs warm
  g_cold = o.cold;
  std::fprintf(stderr,
               "# %d OpenMP threads; sgemm 1024^3 (OpenBLAS, all threads): %.1f GFLOP/s; chunk "
               "product %dx%lldx%lld per thread in a parallel region: OpenBLAS %.1f, tarn tile "
               "%.1f GFLOP/s (all threads together)\n",
               omp_get_max_threads(), y.sgemm_big, o.chunk, static_cast<long long>(o.d),
               static_cast<long long>(o.e + 1), y.sgemm_chunk_blas, y.sgemm_chunk_tile);
  if (o.cold) std::fprintf(stderr, "# --cold: caches evicted before every timed run\n");
  std::printf(
      "algo,map,bh,n,d,e,chunk,fwd_ms,fwdbwd_ms,fwd_gflops,fwdbwd_gflops,fwdbwd_vs_sgemm,"
      "fwdbwd_ns_per_token,fwd_peak_mib,fwdbwd_peak_mib,fwdbwd_peak_vs_tensors,sgemm_gflops\n");
  std::vector<int64_t> lengths = o.n_list;
  if (lengths.empty())
    for (int64_t n = o.n_min; n <= o.n_max; n *= 2) lengths.push_back(n);
  for (const std::string& algo : o.algos) {
    for (int64_t bh : o.bh) {
      for (int64_t n : lengths) {
        if (algo == "softmax" && n > o.softmax_n_max) break;
        const double gib = 4.0 * bh * n * (4.0 * o.d + 4.0 * o.e) / (1 << 30);
        if (gib > o.max_gib) break;
        const Result r = algo == "softmax" ? run_softmax(o, bh, n)
                                           : run_linear(o, bh, n, algo == "causal");
        const double fb_flops = r.fwd_flops + r.bwd_flops;
        const double fb_gflops = fb_flops / r.fwdbwd_s / 1e9;
        const std::string map = algo == "softmax" ? "-"
                                : std::string(o.unfused ? "unfused-" : "") +
                                      k::feature_map_name(o.map);
        std::printf("%s,%s,%lld,%lld,%lld,%lld,%d,%.3f,%.3f,%.1f,%.1f,%.2f,%.1f,%.1f,%.1f,%.3f,%.1f\n",
                    algo.c_str(), map.c_str(), static_cast<long long>(bh), static_cast<long long>(n),
                    static_cast<long long>(o.d), static_cast<long long>(o.e),
                    algo == "softmax" ? 0 : o.chunk, r.fwd_s * 1e3, r.fwdbwd_s * 1e3,
                    r.fwd_flops / r.fwd_s / 1e9, fb_gflops, fb_gflops / y.sgemm_big,
                    r.fwdbwd_s * 1e9 / double(bh * n), double(r.fwd_peak) / (1 << 20),
                    double(r.fwdbwd_peak) / (1 << 20), double(r.fwdbwd_peak) / r.tensors_bytes,
                    y.sgemm_big);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
