// Attention benchmark: causal linear, bidirectional linear and softmax attention, forward and
// forward+backward, against sequence length N and B*H, with the sgemm speed of this machine
// measured in the same process as the yardstick. CSV on stdout, notes on stderr.
//
//   attention_bench [--n-min 256] [--n-max 65536] [--bh 4,8,32] [--d 64] [--e 64]
//                   [--chunk 64] [--algos causal,bidir,softmax] [--softmax-n-max 16384]
//                   [--min-time 0.3] [--reps 3] [--map elu1|identity]
//
// Each time is the median of at least --reps runs and of as many as fit in --min-time
// seconds. Peak memory is every buffer the step needs: inputs, outputs, saved tensors,
// gradients and the kernel's workspace (what the allocator would hold at its peak).
// GFLOP/s use the FLOP formulas of kernels/linear_attention.h and softmax_attention.h.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/linear_attention_simd.h"
#include "kernels/linear_attention.h"
#include "kernels/softmax_attention.h"

namespace {

namespace k = tarn::kernels::cpu;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t n_min = 256, n_max = 65536, softmax_n_max = 16384;
  std::vector<int64_t> bh = {4, 8, 32};
  int64_t d = 64, e = 64;
  int chunk = 64;
  std::vector<std::string> algos = {"causal", "bidir", "softmax"};
  double min_time = 0.3;
  int reps = 3;
  k::FeatureMap map = k::FeatureMap::elu1;
  double max_gib = 12.0;  // skip configurations whose buffers exceed this
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "attention_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--n-min") o.n_min = std::stoll(next());
    else if (a == "--n-max") o.n_max = std::stoll(next());
    else if (a == "--softmax-n-max") o.softmax_n_max = std::stoll(next());
    else if (a == "--bh") {
      o.bh.clear();
      for (auto& s : split(next())) o.bh.push_back(std::stoll(s));
    } else if (a == "--d") o.d = std::stoll(next());
    else if (a == "--e") o.e = std::stoll(next());
    else if (a == "--chunk") o.chunk = std::stoi(next());
    else if (a == "--algos") o.algos = split(next());
    else if (a == "--min-time") o.min_time = std::stod(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--max-gib") o.max_gib = std::stod(next());
    else if (a == "--map") {
      const std::string m = next();
      if (m == "elu1") o.map = k::FeatureMap::elu1;
      else if (m == "identity") o.map = k::FeatureMap::identity;
      else {
        std::fprintf(stderr, "attention_bench: --map must be elu1 or identity, got %s\n", m.c_str());
        std::exit(2);
      }
    } else {
      std::fprintf(stderr, "attention_bench: unknown flag %s (see the file header)\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Median seconds of fn over at least `reps` runs and `min_time` seconds (one warm-up first).
double time_median(const std::function<void()>& fn, int reps, double min_time) {
  fn();
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < reps ||
         std::chrono::duration<double>(Clock::now() - start).count() < min_time) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
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
  double fwd_bytes = 0, fwdbwd_bytes = 0;
};

Result run_linear(const Options& o, int64_t bh, int64_t n, bool causal) {
  const k::LinearAttentionDims dims{1, bh, n, n, o.d, o.e};
  k::LinearAttentionConfig cfg;
  cfg.causal = causal;
  cfg.chunk = o.chunk;
  cfg.feature_map = o.map;
  const size_t nd = bh * n * o.d, ne = bh * n * o.e;
  std::vector<float> q = random_floats(nd, 5), kk = random_floats(nd, 6), v = random_floats(ne, 7);
  std::vector<float> dout = random_floats(ne, 8), out(ne), den(bh * n), dq(nd), dk(nd), dv(ne);
  std::vector<float> wf(k::linear_attention_forward_workspace_floats(dims, cfg));
  std::vector<float> wb(k::linear_attention_backward_workspace_floats(dims, cfg));
  auto fwd = [&] {
    k::linear_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out.data(), den.data(),
                                wf.data(), wf.size());
  };
  auto bwd = [&] {
    k::linear_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), out.data(),
                                 den.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                 wb.data(), wb.size());
  };
  Result r;
  r.fwd_s = time_median(fwd, o.reps, o.min_time);
  r.fwdbwd_s = time_median([&] { fwd(), bwd(); }, o.reps, o.min_time);
  r.fwd_flops = k::linear_attention_flops(dims, cfg, false);
  r.bwd_flops = k::linear_attention_flops(dims, cfg, true);
  const double f = sizeof(float);
  r.fwd_bytes = f * (2 * nd + 2 * ne + bh * n + wf.size());
  r.fwdbwd_bytes = f * (4 * nd + 4 * ne + bh * n + std::max(wf.size(), wb.size()));
  return r;
}

Result run_softmax(const Options& o, int64_t bh, int64_t n) {
  const k::SoftmaxAttentionDims dims{1, bh, n, n, o.d, o.e};
  k::SoftmaxAttentionConfig cfg;
  cfg.causal = true;
  const size_t nd = bh * n * o.d, ne = bh * n * o.e;
  std::vector<float> q = random_floats(nd, 5), kk = random_floats(nd, 6), v = random_floats(ne, 7);
  std::vector<float> dout = random_floats(ne, 8), out(ne), lse(bh * n), dq(nd), dk(nd), dv(ne);
  std::vector<float> wf(k::softmax_attention_forward_workspace_floats(dims, cfg));
  std::vector<float> wb(k::softmax_attention_backward_workspace_floats(dims, cfg));
  auto fwd = [&] {
    k::softmax_attention_forward(dims, cfg, q.data(), kk.data(), v.data(), out.data(), lse.data(),
                                 wf.data(), wf.size());
  };
  auto bwd = [&] {
    k::softmax_attention_backward(dims, cfg, q.data(), kk.data(), v.data(), out.data(),
                                  lse.data(), dout.data(), dq.data(), dk.data(), dv.data(),
                                  wb.data(), wb.size());
  };
  Result r;
  // Softmax is quadratic: one run each beyond 4K keeps the whole sweep within minutes.
  const int reps = n > 4096 ? 1 : o.reps;
  const double min_time = n > 4096 ? 0.0 : o.min_time;
  r.fwd_s = time_median(fwd, reps, min_time);
  r.fwdbwd_s = time_median([&] { fwd(), bwd(); }, reps, min_time);
  r.fwd_flops = k::softmax_attention_flops(dims, cfg, false);
  r.bwd_flops = k::softmax_attention_flops(dims, cfg, true);
  const double f = sizeof(float);
  r.fwd_bytes = f * (2 * nd + 2 * ne + bh * n + wf.size());
  r.fwdbwd_bytes = f * (4 * nd + 4 * ne + bh * n + std::max(wf.size(), wb.size()));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Yardstick y = measure_sgemm(o);
  std::fprintf(stderr,
               "# %d OpenMP threads; sgemm 1024^3 (OpenBLAS, all threads): %.1f GFLOP/s; chunk "
               "product %dx%lldx%lld per thread in a parallel region: OpenBLAS %.1f, tarn tile "
               "%.1f GFLOP/s (all threads together)\n",
               omp_get_max_threads(), y.sgemm_big, o.chunk, static_cast<long long>(o.d),
               static_cast<long long>(o.e + 1), y.sgemm_chunk_blas, y.sgemm_chunk_tile);
  std::printf(
      "algo,bh,n,d,e,chunk,fwd_ms,fwdbwd_ms,fwd_gflops,fwdbwd_gflops,fwdbwd_vs_sgemm,"
      "fwdbwd_ns_per_token,fwd_peak_mib,fwdbwd_peak_mib,sgemm_gflops\n");
  for (const std::string& algo : o.algos) {
    if (algo != "causal" && algo != "bidir" && algo != "softmax") {
      std::fprintf(stderr, "attention_bench: unknown algo %s\n", algo.c_str());
      return 2;
    }
    for (int64_t bh : o.bh) {
      for (int64_t n = o.n_min; n <= o.n_max; n *= 2) {
        if (algo == "softmax" && n > o.softmax_n_max) break;
        const double gib = 4.0 * bh * n * (4.0 * o.d + 4.0 * o.e) / (1 << 30);
        if (gib > o.max_gib) break;
        const Result r = algo == "softmax" ? run_softmax(o, bh, n)
                                           : run_linear(o, bh, n, algo == "causal");
        const double fb_flops = r.fwd_flops + r.bwd_flops;
        const double fb_gflops = fb_flops / r.fwdbwd_s / 1e9;
        std::printf("%s,%lld,%lld,%lld,%lld,%d,%.3f,%.3f,%.1f,%.1f,%.2f,%.1f,%.1f,%.1f,%.1f\n",
                    algo.c_str(), static_cast<long long>(bh), static_cast<long long>(n),
                    static_cast<long long>(o.d), static_cast<long long>(o.e),
                    algo == "softmax" ? 0 : o.chunk, r.fwd_s * 1e3, r.fwdbwd_s * 1e3,
                    r.fwd_flops / r.fwd_s / 1e9, fb_gflops, fb_gflops / y.sgemm_big,
                    r.fwdbwd_s * 1e9 / double(bh * n), r.fwd_bytes / (1 << 20),
                    r.fwdbwd_bytes / (1 << 20), y.sgemm_big);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
