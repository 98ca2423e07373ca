#include "tools/bench/common/gpu_peaks.h"

namespace tarn::bench {

int fp32_lanes_per_sm(int major, int minor) { return (major == 7 || (major == 8 && minor == 0)) ? 64 : 128; }

int bf16_flops_per_sm_clock(int major, int minor) {
  if (major >= 9) return 4096;
  return major == 8 && minor == 0 ? 2048 : 1024;
}

}  // namespace tarn::bench

#if defined(TARN_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/check.h"

namespace tarn::bench {

GpuPeaks query_gpu_peaks(int device) {
  // (cudaDeviceProp lost clockRate and memoryClockRate in CUDA 13: the attributes remain.)
  auto attribute = [device](cudaDeviceAttr what, const char* name) {
    int value = 0;
    const cudaError_t err = cudaDeviceGetAttribute(&value, what, device);
    TARN_CHECK(err == cudaSuccess, "cudaDeviceGetAttribute(", name, ") failed: ", cudaGetErrorString(err));
    return value;
  };
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, device);
  TARN_CHECK(err == cudaSuccess, "cudaGetDeviceProperties failed: ", cudaGetErrorString(err));
  GpuPeaks p;
  p.name = prop.name;
  p.major = prop.major;
  p.minor = prop.minor;
  p.sms = prop.multiProcessorCount;
  p.clock_hz = attribute(cudaDevAttrClockRate, "cudaDevAttrClockRate") * 1e3;
  const double mem_clock_hz = attribute(cudaDevAttrMemoryClockRate, "cudaDevAttrMemoryClockRate") * 1e3;
  const int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, "cudaDevAttrGlobalMemoryBusWidth");
  p.l2_bytes = attribute(cudaDevAttrL2CacheSize, "cudaDevAttrL2CacheSize");
  p.memory_bytes = static_cast<long long>(prop.totalGlobalMem);
  p.f32_flops = 2.0 * p.sms * fp32_lanes_per_sm(p.major, p.minor) * p.clock_hz;
  p.bf16_flops = static_cast<double>(p.sms) * bf16_flops_per_sm_clock(p.major, p.minor) * p.clock_hz;
  p.bytes_per_s = 2.0 * mem_clock_hz * (bus_bits / 8.0);
  return p;
}

}  // namespace tarn::bench
#endif
