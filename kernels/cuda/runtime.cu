// CUDA runtime wrappers: every call checked, errors name the call (kernels/cuda_runtime.h).
#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/cuda_runtime.h"

#define TARN_CUDA_CHECK(call) TARN_CHECK_STATUS(call, #call, cudaSuccess, cudaGetErrorString)

namespace tarn::kernels::cuda {

bool backend_built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void* device_malloc(size_t bytes, int device) {
  void* p = nullptr;
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

// The frees and copies are the backend table's (kernels/cuda/backend.cu): the same checked calls.
void device_free(void* ptr, int device) { backend().deallocate(ptr, device); }

void copy_host_to_device(void* dst, const void* src, size_t bytes, int device) {
  backend().copy_host_to_device(dst, src, bytes, device);
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, int device) {
  backend().copy_device_to_host(dst, src, bytes, device);
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, int device) {
  backend().copy_device_to_device(dst, src, bytes, device);
}

void memset_zero(void* dst, size_t bytes, int device) {
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMemset(dst, 0, bytes));
}

}  // namespace tarn::kernels::cuda
