#pragma once
// Which BLAS the process really loaded. Debian's update-alternatives can hand us the reference
// BLAS (~4 GFLOP/s here) or OpenBLAS' pthread build (fights our OpenMP pool: half speed);
// tarn links the OpenMP build on purpose and says at start-up what it got.
#include <string>

namespace tarn::kernels {

struct BlasInfo {
  std::string config;   // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string threading;  // "OpenMP", "pthreads" or "sequential"
  int threads = 0;
  bool is_openmp() const { return threading == "OpenMP"; }
  std::string str() const;  // one line for the log
};

BlasInfo blas_info();

}  // namespace tarn::kernels
