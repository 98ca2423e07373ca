// CUDA linear attention (kernels/cuda/linear_attention.cu) on the GPU: each pass first checked
// against the CPU kernel on a small shape, then timed on transformer shapes, as CSV with GFLOP/s
// (kernels/linear_attention.h's count) and its fraction of the device's f32 FMA peak, and the
// bandwidth of the pass's compulsory traffic (inputs read once, outputs written once) against
// the device's memory bandwidth. Usage: cuda_linear_attention_bench [--quick]
// Prints a note and exits 0 when tarn was built without CUDA or no device is present.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda_runtime.h"
#include "kernels/linear_attention.h"

#if defined(TARN_WITH_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>

#include "kernels/cuda_kernels.h"
#endif

#if defined(TARN_WITH_CUDA)
namespace {

namespace cpu = tarn::kernels::cpu;
namespace gpu = tarn::kernels::cuda;

constexpr int kFp32LanesPerSm = 128;  // FP32 FMA lanes per SM on sm_80 / sm_90

// A device buffer filled from a host vector.
struct Buf {
  float* p = nullptr;
  size_t n = 0;
  explicit Buf(const std::vector<float>& h) : n(h.size()) {
    p = static_cast<float*>(gpu::device_malloc(std::max<size_t>(n, 1) * sizeof(float), 0));
    if (n) gpu::copy_host_to_device(p, h.data(), n * sizeof(float), 0);
  }
  explicit Buf(size_t count) : Buf(std::vector<float>(count, 0.0f)) {}
  ~Buf() { gpu::device_free(p, 0); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  std::vector<float> host() const {
    std::vector<float> h(n);
    if (n) gpu::copy_device_to_host(h.data(), p, n * sizeof(float), 0);
    return h;
  }
};

std::vector<float> random_vec(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0.0, scale = 1e-30;
  for (float w : want) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / scale);
  return worst;
}

struct Problem {
  cpu::LinearAttentionDims dims;
  cpu::LinearAttentionConfig cfg;
  std::vector<float> a, b, v, dout;
  Problem(int64_t batch, int64_t heads, int64_t nq, int64_t nk, int64_t d, int64_t e, bool causal)
      : dims{batch, heads, nq, nk, d, e} {
    cfg.causal = causal;
    const int64_t bh = batch * heads;
    a = random_vec(bh * nq * d, 0.05f, 1.0f, 1);
    b = random_vec(bh * nk * d, 0.05f, 1.0f, 2);
    v = random_vec(bh * nk * e, -1.0f, 1.0f, 3);
    dout = random_vec(bh * nq * e, -1.0f, 1.0f, 4);
  }
};

// Forward and backward on the GPU, outputs in host vectors (for the check) or discarded.
struct GpuRun {
  Buf a, b, v, dout, out, den, da, db, dv, ws;
  const Problem& pr;
  explicit GpuRun(const Problem& p)
      : a(p.a), b(p.b), v(p.v), dout(p.dout), out(size_t(p.dims.batch * p.dims.heads * p.dims.n_q * p.dims.e)),
        den(size_t(p.dims.batch * p.dims.heads * p.dims.n_q)), da(p.a.size()), db(p.b.size()), dv(p.v.size()),
        ws(std::max(gpu::linear_attention_forward_workspace_floats(p.dims, p.cfg),
                    gpu::linear_attention_backward_workspace_floats(p.dims, p.cfg))),
        pr(p) {}
  void forward() {
    gpu::linear_attention_forward(pr.dims, pr.cfg, a.p, b.p, v.p, out.p, den.p, ws.p, ws.n);
  }
  void backward() {
    gpu::linear_attention_backward(pr.dims, pr.cfg, a.p, b.p, v.p, out.p, den.p, dout.p, da.p, db.p, dv.p, ws.p,
                                   ws.n);
  }
};

// Median milliseconds of fn over `repeats` runs, timed with events after one warm-up run.
template <class Fn>
double time_ms(Fn fn, int repeats) {
  fn();
  cudaDeviceSynchronize();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms(repeats);
  for (int r = 0; r < repeats; ++r) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&ms[r], start, stop);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[repeats / 2];
}

// Checks forward and backward of a small problem against the CPU; returns false on a mismatch.
bool check(bool causal, int64_t nq, int64_t nk) {
  Problem p(2, 3, nq, nk, 48, 40, causal);
  const int64_t bh = 6;
  std::vector<float> out(bh * nq * 40), den(bh * nq), da(p.a.size()), db(p.b.size()), dv(p.v.size());
  std::vector<float> ws(cpu::linear_attention_forward_workspace_floats(p.dims, p.cfg));
  cpu::linear_attention_forward(p.dims, p.cfg, p.a.data(), p.b.data(), p.v.data(), out.data(), den.data(),
                                ws.data(), ws.size());
  ws.assign(cpu::linear_attention_backward_workspace_floats(p.dims, p.cfg), 0.0f);
  cpu::linear_attention_backward(p.dims, p.cfg, p.a.data(), p.b.data(), p.v.data(), out.data(), den.data(),
                                 p.dout.data(), da.data(), db.data(), dv.data(), ws.data(), ws.size());
  GpuRun g(p);
  g.forward();
  g.backward();
  const double errs[] = {max_rel_err(g.out.host(), out), max_rel_err(g.den.host(), den),
                         max_rel_err(g.da.host(), da), max_rel_err(g.db.host(), db), max_rel_err(g.dv.host(), dv)};
  const double worst = *std::max_element(std::begin(errs), std::end(errs));
  std::fprintf(stderr, "# check %s Nq=%lld Nk=%lld vs CPU: max error / max |value| = %.2e%s\n",
               causal ? "causal" : "bidirectional", (long long)nq, (long long)nk, worst,
               worst < 1e-4 ? "" : "  MISMATCH");
  return worst < 1e-4;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
#if !defined(TARN_WITH_CUDA)
  (void)quick;
  std::printf("# cuda_linear_attention_bench: tarn was built without CUDA (TARN_CUDA=OFF); nothing to measure\n");
  return 0;
#else
  if (gpu::device_count() == 0) {
    std::printf("# cuda_linear_attention_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  const double peak_gflops = 2.0 * prop.multiProcessorCount * kFp32LanesPerSm * clock_khz * 1e3 / 1e9;
  const double peak_gbps = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  std::fprintf(stderr, "# device: %s, %d SMs; f32 FMA peak %.0f GFLOP/s, memory %.0f GB/s (from the boost clocks)\n",
               prop.name, prop.multiProcessorCount, peak_gflops, peak_gbps);

  bool ok = check(true, 200, 200) && check(false, 200, 200) && check(false, 65, 130);
  if (!ok) {
    std::fprintf(stderr, "# the CUDA kernels disagree with the CPU: not timing them\n");
    return 1;
  }

  struct Shape {
    int64_t batch, heads, n, d, e;
  };
  std::vector<Shape> shapes = {{8, 8, 1024, 64, 64}, {8, 8, 4096, 64, 64}, {4, 8, 16384, 64, 64},
                               {8, 16, 2048, 32, 32}, {8, 8, 2048, 128, 128}};
  if (quick) shapes.resize(2);
  const int repeats = quick ? 5 : 21;
  std::printf("pass,batch,heads,N,d,e,median_ms,gflops,fraction_of_fp32_peak,gbps,fraction_of_bandwidth\n");
  for (const Shape& s : shapes) {
    for (bool causal : {true, false}) {
      Problem p(s.batch, s.heads, s.n, s.n, s.d, s.e, causal);
      GpuRun g(p);
      const double bh = double(s.batch * s.heads), n = double(s.n);
      // Compulsory bytes: forward reads a, b, v and writes out, den; backward reads a, b, v, out,
      // den, dout and writes da, db, dv.
      const double fwd_bytes = 4 * bh * n * (2 * s.d + 2 * s.e + 1);
      const double bwd_bytes = 4 * bh * n * (4 * s.d + 4 * s.e + 1);
      for (bool backward : {false, true}) {
        const double ms = backward ? time_ms([&] { g.backward(); }, repeats) : time_ms([&] { g.forward(); }, repeats);
        const double gflops = cpu::linear_attention_flops(p.dims, p.cfg, backward) / (ms * 1e-3) / 1e9;
        const double gbps = (backward ? bwd_bytes : fwd_bytes) / (ms * 1e-3) / 1e9;
        std::printf("%s %s,%lld,%lld,%lld,%lld,%lld,%.3f,%.1f,%.3f,%.1f,%.3f\n", causal ? "causal" : "bidirectional",
                    backward ? "backward" : "forward", (long long)s.batch, (long long)s.heads, (long long)s.n,
                    (long long)s.d, (long long)s.e, ms, gflops, gflops / peak_gflops, gbps, gbps / peak_gbps);
      }
    }
  }
  return 0;
#endif
}
