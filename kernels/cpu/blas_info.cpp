#include "kernels/blas_info.h"

#include <cblas.h>

#include <cctype>
#include <cstdlib>

// Exported by OpenBLAS' DYNAMIC_ARCH builds, not declared in cblas.h.
extern "C" char* openblas_get_corename(void);

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
  const char* core = openblas_get_corename();
  info.core = core ? core : "unknown";
  return info;
}

namespace {
bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

bool using_avx2_kernels() {
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return core == "haswell" || core == "zen";
}
}  // namespace

std::string blas_kernel_hint() {
  if (!cpu_has_avx512() || !using_avx2_kernels()) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return std::string("this CPU has AVX-512 but OpenBLAS runs its ") + openblas_get_corename() + " kernels" +
         (forced ? std::string(" (OPENBLAS_CORETYPE=") + forced + " is set)" : std::string()) +
         "; unsetting it (OpenBLAS then picks AVX-512 kernels) ran sgemm 1.9x faster on the machine tarn was developed on";
}

std::string BlasInfo::str() const {
  std::string s = config + ", kernels " + core + ", " + threading + " threading, " + std::to_string(threads) + " threads";
  if (!is_openmp()) s += " (WARNING: expected OpenBLAS' OpenMP build; expect slow or oversubscribed GEMM)";
  return s;
}

}  // namespace tarn::kernels
