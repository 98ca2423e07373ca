#pragma once
// Per-device allocators with current/peak statistics. The CPU allocator aligns to 64 bytes and
// caches freed blocks by size class, so a training step re-uses last step's buffers instead of
// paying for page faults again.
#include <cstddef>
#include <cstdint>

#include "framework/device.h"

namespace tarn {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live tensors (rounded to the size class)
  int64_t peak_bytes = 0;     // high-water mark of current_bytes since the last reset
  int64_t cached_bytes = 0;   // freed blocks kept for re-use
  int64_t allocations = 0;    // calls to allocate() since start
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;      // peak := current
  virtual void release_cache() = 0;   // return cached blocks to the system
  // The number of bytes an allocation of `bytes` really holds.
  virtual size_t rounded_size(size_t bytes) const = 0;
};

Allocator& allocator_for(Device d);
inline MemoryStats memory_stats(Device d = Device::cpu()) { return allocator_for(d).stats(); }
inline void reset_peak_memory(Device d = Device::cpu()) { allocator_for(d).reset_peak(); }

}  // namespace tarn
