#include "framework/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>

#include "framework/caching_allocator.h"
#include "kernels/check.h"
#include "kernels/backend.h"

namespace tarn {
namespace {

constexpr size_t kAlignment = 64;       // a cache line; AVX-512 loads never straddle
constexpr size_t kHugePage = 2u << 20;

// Small blocks come from malloc. Blocks of a page class (CachingAllocator::kPageClassBytes and
// up) are mapped and unmapped directly: glibc keeps freed chunks below its (growing) mmap
// threshold in its heaps, so memory our cache gives back would stay resident. Blocks of 2 MiB
// and more start on a 2 MiB boundary and are marked for transparent huge pages (this kernel
// grants them on madvise only): long sequences stream tensors of many MiB, and with 4 KiB pages
// the TLB misses cost a measurable share of the attention scan.
void* host_alloc(size_t bytes) {
  if (bytes < CachingAllocator::kPageClassBytes) return std::aligned_alloc(kAlignment, bytes);
  const size_t slack = bytes >= kHugePage ? kHugePage : 0;
  void* mapped = mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  if (slack == 0) return mapped;
  const auto begin = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(mapped, aligned - begin);
  if (const size_t tail = begin + bytes + slack - (aligned + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);  // a hint: failure only costs speed
  return reinterpret_cast<void*>(aligned);
}

void host_free(void* p, size_t bytes) {
  if (bytes < CachingAllocator::kPageClassBytes)
    std::free(p);
  else
    munmap(p, bytes);
}

}  // namespace

Allocator& allocator_for(Device d) {
  // Leaked on purpose: tensors in static storage may be freed after main() returns.
  static CachingAllocator* cpu = new CachingAllocator(host_alloc, host_free);
  if (d.is_cpu()) return *cpu;
  constexpr int kMaxDevices = 16;
  TARN_CHECK(d.index >= 0 && d.index < kMaxDevices, "allocator: no such device ", d.str());
  static std::mutex mu;
  static CachingAllocator* cuda[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!cuda[d.index]) {
    // The CUDA table's raw calls (kernels/backend.h): real device memory, or host memory
    // under the emulated backend a test installed. Throws "no CUDA device ..." without one.
    const kernels::Backend* backend = nullptr;
    try {
      backend = &kernels::cuda_backend();
    } catch (const Error& e) {
      throw Error(str_cat("device ", d.str(), ": ", e.what()));
    }
    const int count = kernels::cuda_device_count();
    TARN_CHECK(d.index < count, "device ", d.str(), ": not present (", count, " CUDA devices visible)");
    const int index = d.index;
    cuda[d.index] = new CachingAllocator([backend, index](size_t bytes) { return backend->allocate(bytes, index); },
                                         [backend, index](void* p, size_t) { backend->deallocate(p, index); });
  }
  return *cuda[d.index];
}

ResidentMemory resident_memory() {
  ResidentMemory r;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kib) r.current_bytes = kib * 1024;
    if (key == "VmHWM:" && status >> kib) r.peak_bytes = kib * 1024;
  }
  return r;
}

}  // namespace tarn
