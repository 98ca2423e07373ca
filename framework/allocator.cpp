#include "framework/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/check.h"
#include "kernels/backend.h"

namespace tarn {
namespace {

constexpr size_t kAlignment = 64;                   // a cache line; AVX-512 loads never straddle
constexpr size_t kGranule = 512;                    // size classes: multiples of this
constexpr int64_t kMaxCachedBytes = 4LL << 30;      // beyond this, freed blocks go back to the OS

// Size-class caching allocator shared by the CPU and CUDA devices; only the raw calls differ.
class CachingAllocator : public Allocator {
 public:
  using RawAlloc = void* (*)(size_t, int);
  using RawFree = void (*)(void*, int);
  CachingAllocator(RawAlloc a, RawFree f, int device) : raw_alloc_(a), raw_free_(f), device_(device) {}
  ~CachingAllocator() override { release_cache(); }

  size_t rounded_size(size_t bytes) const override {
    return bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule;
  }

  void* allocate(size_t bytes) override {
    const size_t size = rounded_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    void* p = nullptr;
    auto it = cache_.find(size);
    if (it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(size);
    } else {
      p = raw_alloc_(size, device_);
      if (!p) {  // out of memory: give back what we cache and try once more
        release_cache_locked();
        p = raw_alloc_(size, device_);
      }
      if (!p) throw std::bad_alloc();
    }
    stats_.current_bytes += static_cast<int64_t>(size);
    if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
    return p;
  }

  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    const size_t size = rounded_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.current_bytes -= static_cast<int64_t>(size);
    if (stats_.cached_bytes + static_cast<int64_t>(size) > kMaxCachedBytes) {
      raw_free_(p, device_);
      return;
    }
    cache_[size].push_back(p);
    stats_.cached_bytes += static_cast<int64_t>(size);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes = stats_.current_bytes;
  }
  void release_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

 private:
  void release_cache_locked() {
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) raw_free_(p, device_);
    cache_.clear();
    stats_.cached_bytes = 0;
  }

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  int device_;
  mutable std::mutex mu_;
  MemoryStats stats_;
  std::map<size_t, std::vector<void*>> cache_;
};

// Blocks of 2 MiB and more are 2 MiB-aligned and marked for transparent huge pages (this
// kernel grants them on madvise only): long sequences stream tensors of many MiB, and with
// 4 KiB pages the TLB misses cost a measurable share of the attention scan.
constexpr size_t kHugePage = 2u << 20;

void* host_alloc(size_t bytes, int) {
  if (bytes < kHugePage) return std::aligned_alloc(kAlignment, bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p) madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure only costs speed
  return p;
}
void host_free(void* p, int) { std::free(p); }

}  // namespace

Allocator& allocator_for(Device d) {
  // Leaked on purpose: tensors in static storage may be freed after main() returns.
  static CachingAllocator* cpu = new CachingAllocator(host_alloc, host_free, 0);
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
    cuda[d.index] = new CachingAllocator(backend->allocate, backend->deallocate, d.index);
  }
  return *cuda[d.index];
}

}  // namespace tarn
