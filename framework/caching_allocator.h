#pragma once
// The caching allocator both devices use; only the raw calls that get memory from the system
// differ (host: malloc and mmap; CUDA: cudaMalloc). Declared here so tests can drive it with
// counting raw calls.
//
// Why this design. The first version cached freed blocks by exact size with a 4 GB cap, so
// variable batch shapes (every batch pads to its own longest sequence) left blocks of hundreds
// of sizes that no later request matched: 5-6 GB resident for a 1 GB working set. Mature
// allocators bound their caches (PyTorch's CUDA allocator: size bins, best fit, blocks split
// and freed on pressure; jemalloc: size classes and decay). Here:
//   - size classes: 512-byte steps below kPageClassBytes, 4 KiB pages above;
//   - best fit: a request takes the smallest cached block at least its size and at most a
//     quarter larger (slack kept small, since a granted block counts as live in full);
//   - a bound: cached + live <= max(kCacheBoundRatio * live high water, live + kCacheFloorBytes).
//     A training step reaches its high water every step, so the cache keeps what the next step
//     will ask for again and nothing beyond; over the bound, the least recently freed blocks go
//     back to the system first;
//   - on pressure (a raw allocation fails), the whole cache is released and the call retried.
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "framework/allocator.h"

namespace tarn {

class CachingAllocator : public Allocator {
 public:
  using RawAlloc = std::function<void*(size_t bytes)>;       // nullptr when out of memory
  using RawFree = std::function<void(void* p, size_t bytes)>;  // bytes as given to RawAlloc

  static constexpr size_t kSmallGranule = 512;
  static constexpr size_t kPageGranule = 4096;
  static constexpr size_t kPageClassBytes = 128 << 10;

  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator() override;

  size_t rounded_size(size_t bytes) const override;
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  void release_cache() override;

 private:
  std::pair<void*, size_t> take_cached_locked(size_t size);  // the best fit and its size, or null
  // Gives cached blocks back, least recently freed first, until the bound holds with `incoming`
  // more bytes live.
  void evict_to_bound_locked(int64_t incoming);
  void release_cache_locked();

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  MemoryStats stats_;
  uint64_t clock_ = 0;  // orders frees, for least-recently-freed eviction
  std::unordered_map<void*, size_t> live_;                   // block -> its size
  // Cached blocks twice: by (size, ~freed at, block), so that among equal sizes the most
  // recently freed (the warmest in the CPU caches) comes first; and by (freed at, size, block),
  // oldest first, for eviction.
  std::set<std::tuple<size_t, uint64_t, void*>> by_size_;
  std::set<std::tuple<uint64_t, size_t, void*>> by_age_;
};

}  // namespace tarn
