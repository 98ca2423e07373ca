#pragma once
// Per-device allocators with current/peak statistics. Both devices share one caching design:
// freed blocks are kept for re-use (a training step re-uses last step's buffers instead of
// paying for page faults or cudaMalloc again), a request takes the best-fitting cached block
// within a small slack, and the cache is bounded by the live high-water mark, so variable
// batch shapes cannot make it hoard (the bound is stated beside kCacheBoundRatio below).
#include <cstddef>
#include <cstdint>

#include "framework/device.h"

namespace tarn {

struct MemoryStats {
  int64_t current_bytes = 0;     // bytes held by live tensors (the blocks they were given)
  int64_t peak_bytes = 0;        // high-water mark of current_bytes since the last reset
  int64_t high_water_bytes = 0;  // high-water mark of current_bytes since start (never reset)
  int64_t cached_bytes = 0;      // freed blocks kept for re-use
  int64_t allocations = 0;       // calls to allocate() since start
  int64_t system_allocations = 0;  // of those, how many the system (malloc, mmap, cudaMalloc) served
  int64_t evictions = 0;         // cached blocks given back to the system to respect the bound
};

// The cache bound: after any call, cached + current <= max(kCacheBoundRatio * high water,
// current + kCacheFloorBytes). The ratio leaves room for blocks that fit a request only within
// the slack; the floor keeps small programs from evicting on every free.
constexpr double kCacheBoundRatio = 1.125;
constexpr int64_t kCacheFloorBytes = 64LL << 20;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;      // peak := current
  virtual void release_cache() = 0;   // return cached blocks to the system
  // The smallest block a request of `bytes` is given (a cached block may be up to a quarter larger).
  virtual size_t rounded_size(size_t bytes) const = 0;
};

Allocator& allocator_for(Device d);
inline MemoryStats memory_stats(Device d = Device::cpu()) { return allocator_for(d).stats(); }
inline void reset_peak_memory(Device d = Device::cpu()) { allocator_for(d).reset_peak(); }

// The process's resident memory from /proc/self/status, in bytes: now (VmRSS) and its peak
// since start (VmHWM). 0 where the file cannot be read.
struct ResidentMemory {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};
ResidentMemory resident_memory();

}  // namespace tarn
