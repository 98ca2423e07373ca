#pragma once
// The GPU's peak rates, from its attributes, for the CUDA benches to quote their figures
// against (only with the CUDA backend: TARN_WITH_CUDA).
//   f32       FMA throughput: 2 x SMs x FP32 lanes per SM x SM clock
//   bf16      dense tensor-core throughput: SMs x bf16 FLOP per SM per clock x SM clock
//   bandwidth memory clock x 2 (DDR) x bus width
#include <string>

namespace tarn::bench {

struct GpuPeaks {
  std::string name;
  int major = 0, minor = 0, sms = 0;
  double clock_hz = 0, f32_flops = 0, bf16_flops = 0, bytes_per_s = 0;
  long long l2_bytes = 0, memory_bytes = 0;
};

// FP32 FMA lanes per SM: 64 on sm_70 and sm_80 (V100, A100), 128 on sm_86, 89, 90, 100.
int fp32_lanes_per_sm(int major, int minor);
// Dense bf16 tensor-core FLOP per SM per clock: 1024 (sm_86/89), 2048 (sm_80), 4096 (sm_90+).
int bf16_flops_per_sm_clock(int major, int minor);

// Device `device`'s peaks; every runtime call is checked (throws tarn::Error naming it).
GpuPeaks query_gpu_peaks(int device = 0);

}  // namespace tarn::bench
