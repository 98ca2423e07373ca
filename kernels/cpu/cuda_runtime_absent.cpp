// Stand-ins for kernels/cuda_runtime.h when tarn is built without CUDA: every entry point but
// the queries throws a message that says how to get the backend.
#ifndef TARN_WITH_CUDA
#include "kernels/check.h"
#include "kernels/cuda_runtime.h"

namespace tarn::kernels::cuda {
namespace {
[[noreturn]] void absent() {
  throw Error("this tarn was built without the CUDA backend (configure with -DTARN_CUDA=ON and nvcc on PATH)");
}
}  // namespace

bool backend_built() { return false; }
int device_count() { return 0; }
void* device_malloc(size_t, int) { absent(); }
void device_free(void*, int) { absent(); }
void copy_host_to_device(void*, const void*, size_t, int) { absent(); }
void copy_device_to_host(void*, const void*, size_t, int) { absent(); }
void copy_device_to_device(void*, const void*, size_t, int) { absent(); }
void memset_zero(void*, size_t, int) { absent(); }

}  // namespace tarn::kernels::cuda
#endif
