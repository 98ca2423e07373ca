// The kernel tables (kernels/backend.h) for the fuzz build, memory functions only. The loaders
// under fuzz create CPU Tensors and copy bytes into them and nothing more; the real tables
// (kernels/cpu/backend.cpp) would link every CPU kernel, and those do not build with clang
// (kernels/cpu/linear_attention_simd.cpp uses GCC's __builtin_shuffle). A kernel entry
// reached here is a null call: a crash the fuzzer reports, which is what it should be.
#include <cstdlib>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/memory.h"

namespace tarn::kernels {
namespace {

void* host_allocate(size_t bytes, int) { return std::malloc(bytes); }
void host_deallocate(void* p, int) { std::free(p); }
void host_copy(void* dst, const void* src, size_t bytes, int) { std::memcpy(dst, src, bytes); }

Backend make_cpu_backend() {
  Backend b{};
  b.name = "cpu (fuzz build: memory functions only)";
  b.allocate = host_allocate;
  b.deallocate = host_deallocate;
  b.copy_host_to_device = host_copy;
  b.copy_device_to_host = host_copy;
  b.copy_device_to_device = host_copy;
  b.fill = cpu::fill;
  b.accumulate = cpu::accumulate;
  return b;
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend b = make_cpu_backend();
  return b;
}

const Backend& cuda_backend() { throw Error("no CUDA device: the fuzz build has no CUDA backend"); }
int cuda_device_count() { return 0; }
void install_cuda_backend(const Backend*) { throw Error("install_cuda_backend: not in the fuzz build"); }

}  // namespace tarn::kernels
