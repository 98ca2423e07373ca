// CUDA runtime wrappers: every call checked, errors name the call (kernels/cuda_runtime.h).
#include <cuda_runtime.h>

#include "kernels/check.h"
#include "kernels/cuda_runtime.h"

#define TARN_CUDA_CHECK(call)                                                                  \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    TARN_CHECK(err_ == cudaSuccess, #call, " failed: ", cudaGetErrorString(err_), " (", __FILE__, \
               ":", __LINE__, ")");                                                            \
  } while (0)

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

void device_free(void* ptr, int device) {
  if (!ptr) return;
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaFree(ptr));
}

void copy_host_to_device(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, int device) {
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void memset_zero(void* dst, size_t bytes, int device) {
  TARN_CUDA_CHECK(cudaSetDevice(device));
  TARN_CUDA_CHECK(cudaMemset(dst, 0, bytes));
}

}  // namespace tarn::kernels::cuda
