#pragma once
// The few CUDA runtime calls the framework needs (memory and copies), behind plain C++
// declarations so that framework/ compiles without CUDA headers. Implemented in
// kernels/cuda/runtime.cu when the CUDA backend is built; every call is checked and a failure
// throws tarn::Error naming the call.
#include <cstddef>

namespace tarn::kernels::cuda {

bool backend_built();          // false when tarn was configured without CUDA
int device_count();            // 0 when no driver or no device
void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device);
void copy_host_to_device(void* dst, const void* src, size_t bytes, int device);
void copy_device_to_host(void* dst, const void* src, size_t bytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t bytes, int device);
void memset_zero(void* dst, size_t bytes, int device);

}  // namespace tarn::kernels::cuda
