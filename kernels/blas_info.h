#pragma once
// Which BLAS the process really loaded. Debian's update-alternatives can hand us the reference
// BLAS (~4 GFLOP/s here) or OpenBLAS' pthread build (fights our OpenMP pool: half speed);
// tarn links the OpenMP build on purpose and says at start-up what it got.
#include <string>

namespace tarn::kernels {

struct BlasInfo {
  std::string config;   // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string core;     // the kernel set in use, openblas_get_corename(): "Haswell", "SkylakeX", ...
  std::string threading;  // "OpenMP", "pthreads" or "sequential"
  int threads = 0;
  bool is_openmp() const { return threading == "OpenMP"; }
  std::string str() const;  // one line for the log
};

BlasInfo blas_info();

// OpenBLAS picks its kernel set from the CPU unless OPENBLAS_CORETYPE forces one. This
// machine's environment forces Haswell (AVX2), while the CPU's own choice (Cooperlake, AVX-512)
// runs sgemm 1.9x faster here (477 vs 258 GFLOP/s, tools/bench/gemm_bench). tarn respects the
// setting and says so at start-up.
// A one-line suggestion when faster BLAS kernels exist than the ones in use ("" otherwise).
std::string blas_kernel_hint();

}  // namespace tarn::kernels
