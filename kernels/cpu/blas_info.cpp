#include "kernels/blas_info.h"

#include <cblas.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "kernels/check.h"

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

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Kernel sets by the widest vectors they use: 0 SSE, 1 AVX, 2 AVX2+FMA, 3 AVX-512, 4 with BF16,
// 5 with AMX. Names OpenBLAS 0.3.21 may report on x86-64; any other is an SSE set (Prescott,
// Core2, Nehalem, Barcelona, ...).
int kernel_rank(const std::string& core) {
  static const std::map<std::string, int> ranks = {
      {"sandybridge", 1}, {"bulldozer", 1}, {"piledriver", 1}, {"steamroller", 1},
      {"haswell", 2},     {"zen", 2},       {"excavator", 2},  {"skylakex", 3},
      {"cooperlake", 4},  {"sapphirerapids", 5}};
  const auto it = ranks.find(lower(core));
  return it == ranks.end() ? 0 : it->second;
}

std::string best_coretype(const CpuVectorSupport& cpu) {
  if (cpu.avx512 && cpu.avx512_bf16) return "Cooperlake";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return cpu.amd ? "Zen" : "Haswell";
  if (cpu.avx) return "Sandybridge";
  return "";
}

constexpr const char* kDetectedVariable = "TARN_BLAS_CORE_DETECTED";

}  // namespace

CpuVectorSupport CpuVectorSupport::of_this_cpu() {
  // __builtin_cpu_supports also asks the OS (XGETBV) whether it saves the wider registers.
  CpuVectorSupport cpu;
  cpu.amd = __builtin_cpu_is("amd");
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  cpu.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  return cpu;
}

std::string better_blas_coretype(const std::string& loaded_core, const CpuVectorSupport& cpu) {
  const std::string best = best_coretype(cpu);
  return !best.empty() && kernel_rank(best) > kernel_rank(loaded_core) ? best : "";
}

void restart_with_better_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || argv == nullptr || argv[0] == nullptr) return;
  const char* name = openblas_get_corename();
  const std::string loaded = name != nullptr ? name : "";
  const std::string better = better_blas_coretype(loaded, CpuVectorSupport::of_this_cpu());
  if (better.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0 || setenv(kDetectedVariable, loaded.c_str(), 1) != 0)
    return;
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc?): go on with the kernels loaded, and leave the environment as it was
  // so that programs started from here detect for themselves.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kDetectedVariable);
}

std::string blas_kernel_hint() {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (const char* detected = std::getenv(kDetectedVariable); detected != nullptr && forced != nullptr)
    return str_cat("OpenBLAS picked its ", detected, " kernels for this CPU, which its version does not know; ",
                   "tarn restarted itself with OPENBLAS_CORETYPE=", forced,
                   ", the best kernels the CPU can run (set OPENBLAS_CORETYPE yourself to choose)");
  const CpuVectorSupport cpu = CpuVectorSupport::of_this_cpu();
  if (!cpu.avx512 || kernel_rank(openblas_get_corename()) != 2) return "";
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
