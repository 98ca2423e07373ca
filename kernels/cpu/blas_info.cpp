#include "kernels/blas_info.h"

#include <cblas.h>

namespace tarn::kernels {

BlasInfo blas_info() {
  BlasInfo info;
  const char* config = openblas_get_config();
  info.config = config ? config : "unknown";
  switch (openblas_get_parallel()) {  // 0: sequential, 1: pthreads, 2: OpenMP
    case 0: info.threading = "sequential"; break;
    case 1: info.threading = "pthreads"; break;
    default: info.threading = "OpenMP"; break;
  }
  info.threads = openblas_get_num_threads();
  return info;
}

std::string BlasInfo::str() const {
  std::string s = config + ", " + threading + " threading, " + std::to_string(threads) + " threads";
  if (!is_openmp()) s += " (WARNING: expected OpenBLAS' OpenMP build; expect slow or oversubscribed GEMM)";
  return s;
}

}  // namespace tarn::kernels
