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

// What the CPU can run, as far as choosing OpenBLAS' kernels goes.
struct CpuVectorSupport {
  bool amd = false;
  bool avx = false;
  bool avx2_fma = false;
  bool avx512 = false;       // F, BW, DQ and VL: what OpenBLAS' SkylakeX kernels use
  bool avx512_bf16 = false;  // Cooperlake's
  static CpuVectorSupport of_this_cpu();
};

// OpenBLAS' DYNAMIC_ARCH build picks its kernels from the CPU's family and model when it is
// loaded, and a model it does not know gets its oldest x86-64 kernels: Debian 12's OpenBLAS
// 0.3.21 runs Prescott (SSE3) kernels on an Emerald Rapids Xeon (family 6, model 207), and
// training there was 3.5x slower than with the Cooperlake kernels the CPU can run. Returns the
// OPENBLAS_CORETYPE naming the best kernel set `cpu` can run, when it is better than
// `loaded_core` (openblas_get_corename()); "" when the loaded one is as good.
std::string better_blas_coretype(const std::string& loaded_core, const CpuVectorSupport& cpu);

// OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded, so only a new process can change its
// choice. When OPENBLAS_CORETYPE is unset and better kernels exist for this CPU, this execs the
// running program again (same arguments, same process id) with OPENBLAS_CORETYPE set to them
// and TARN_BLAS_CORE_DETECTED to what OpenBLAS had picked (blas_kernel_hint() says so). Call it
// first thing in main(), before threads, MPI or files are opened. Returns when there is nothing
// to do, when OPENBLAS_CORETYPE is set (the user's choice stands) or when exec fails.
void restart_with_better_blas_kernels(char** argv);

// A one-line note when the kernels in use are not OpenBLAS' own choice for this CPU, or not the
// best it can run ("" otherwise): after restart_with_better_blas_kernels(), or when
// OPENBLAS_CORETYPE forces AVX2 kernels on an AVX-512 CPU.
std::string blas_kernel_hint();

}  // namespace tarn::kernels
