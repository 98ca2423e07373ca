// The CPU table of kernels/backend.h, and the choice of the CUDA table.
#include "kernels/backend.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/cast.h"
#include "kernels/causal_conv.h"
#include "kernels/chunk_attention.h"
#include "kernels/check.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_runtime.h"
#include "kernels/delta_rule.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layer_norm.h"
#include "kernels/layout.h"
#include "kernels/linear_attention.h"
#include "kernels/memory.h"
#include "kernels/optim.h"
#include "kernels/reduce.h"
#include "kernels/rms_norm.h"
#include "kernels/softmax.h"
#include "kernels/softmax_attention.h"
#include "kernels/taylor_map.h"

namespace tarn::kernels {
namespace {

constexpr size_t kHostAlignment = 64;

void* host_allocate(size_t bytes, int) {
  return std::aligned_alloc(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
}
void host_deallocate(void* p, int) { std::free(p); }
void host_copy(void* dst, const void* src, size_t bytes, int) { std::memcpy(dst, src, bytes); }
bool cpu_fuses(cpu::FeatureMap) { return true; }  // every map, favor included (kernels/feature_maps.h)

const Backend kCpu = {
    "cpu", host_allocate, host_deallocate, host_copy, host_copy, host_copy, cpu::fill, cpu::accumulate, nullptr,
    nullptr, nullptr, nullptr, nullptr, cpu_fuses, std::numeric_limits<int64_t>::max(), /*linear_attention_chunk=*/0, nullptr, nullptr, nullptr,
#define TARN_BACKEND_ENTRY(name) &cpu::name,
    TARN_BACKEND_KERNELS(TARN_BACKEND_ENTRY)
#undef TARN_BACKEND_ENTRY
};

std::atomic<const Backend*> g_installed{nullptr};

// Asked of the driver once: every op on a CUDA tensor passes through cuda_backend().
int driver_device_count() {
  static const int count = cuda::backend_built() ? cuda::device_count() : 0;
  return count;
}

}  // namespace

const Backend& cpu_backend() { return kCpu; }

void install_cuda_backend(const Backend* backend) { g_installed.store(backend); }

int cuda_device_count() { return g_installed.load() ? 1 : driver_device_count(); }

const Backend& cuda_backend() {
  if (const Backend* b = g_installed.load()) return *b;
#ifdef TARN_WITH_CUDA
  TARN_CHECK(driver_device_count() > 0,
             "no CUDA device: the CUDA backend is built but the driver reports no device (check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES, or use device: cpu)");
  return cuda::backend();
#else
  throw Error(
      "no CUDA device: this tarn was built without the CUDA backend (configure with -DTARN_CUDA=ON and nvcc on "
      "PATH, or use device: cpu)");
#endif
}

}  // namespace tarn::kernels
