// GEMM speed through tarn's sgemm path (kernels/gemm.h); `gemm_bench --help` says what it prints.
#include <cstdio>
#include <optional>
#include <vector>

#include "kernels/blas_info.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"
#include "tools/bench/common/bench_util.h"
#include "tools/cli.h"

namespace {
constexpr const char* kDescription = R"(GEMM speed through tarn's sgemm path (kernels/gemm.h), square and transformer-shaped, as
CSV with each figure's fraction of the best square sgemm and of the 2-thread FMA peak quoted in
the developers' guide.)";
constexpr double kFmaPeakGflops = 197.0;  // measured register-FMA peak, 2 threads (DEVELOPERS.md)

struct Shape {
  const char* what;
  int64_t batch, M, N, K;
  bool tb;
};
}  // namespace

int main(int argc, char** argv) {
  using namespace tarn;
  bool quick = false;
  if (const std::optional<int> status = bench::start_bench(argc, argv, kDescription, "gemm_bench", quick,
                                                          "the first four shapes only (square 512 to 2048, one projection)"))
    return *status;
  if (!kernels::blas_kernel_hint().empty()) std::fprintf(stderr, "# note: %s\n", kernels::blas_kernel_hint().c_str());
  std::fprintf(stderr, "# BLAS: %s; OpenMP threads: %d\n", kernels::blas_info().str().c_str(),
               kernels::num_threads());
  const double sgemm = bench::measure_sgemm_gflops();
  std::vector<Shape> shapes = {
      {"square 512", 1, 512, 512, 512, false},
      {"square 1024", 1, 1024, 1024, 1024, false},
      {"square 2048", 1, 2048, 2048, 2048, false},
      {"qkv proj small (8192 tok x 256 -> 256)", 1, 8192, 256, 256, true},
      {"fc1 small (8192 tok x 256 -> 1024)", 1, 8192, 1024, 256, true},
      {"fc2 small (8192 tok x 1024 -> 256)", 1, 8192, 256, 1024, true},
      {"logits small (8192 tok x 256 -> 8000)", 1, 8192, 8000, 256, true},
      {"attn scores (B*H=64, 128x128x64)", 64, 128, 128, 64, true},
      {"chunk product (B*H=64, 64x65x64)", 64, 64, 65, 64, false},
  };
  if (quick) shapes.resize(4);
  std::printf("shape,batch,M,N,K,median_ms,gflops,fraction_of_sgemm,fraction_of_fma_peak\n");
  for (const Shape& s : shapes) {
    std::vector<float> a(s.batch * s.M * s.K, 0.25f), b(s.batch * s.K * s.N, 0.5f), c(s.batch * s.M * s.N);
    const bench::Timing t = bench::time_it([&] {
      kernels::cpu::gemm_batched(false, s.tb, s.batch, s.M, s.N, s.K, 1.0f, a.data(), s.M * s.K, b.data(),
                                 s.K * s.N, 0.0f, c.data(), s.M * s.N);
    });
    const double gflops = 2.0 * s.batch * s.M * s.N * s.K / t.median_s / 1e9;
    std::printf("\"%s\",%lld,%lld,%lld,%lld,%.3f,%.1f,%.2f,%.2f%s\n", s.what, (long long)s.batch, (long long)s.M,
                (long long)s.N, (long long)s.K, t.median_s * 1e3, gflops, gflops / sgemm, gflops / kFmaPeakGflops,
                bench::busy_note(t).c_str());
  }
  std::printf("# best square sgemm this run: %.1f GFLOP/s (%.0f%% of the %.0f GFLOP/s FMA peak)\n", sgemm,
              100 * sgemm / kFmaPeakGflops, kFmaPeakGflops);
  return 0;
}
