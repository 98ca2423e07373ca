#include "framework/caching_allocator.h"

#include <algorithm>
#include <new>

#include "kernels/check.h"

namespace tarn {

CachingAllocator::CachingAllocator(RawAlloc raw_alloc, RawFree raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() { release_cache(); }

size_t CachingAllocator::rounded_size(size_t bytes) const {
  if (bytes == 0) return kSmallGranule;
  const size_t granule = bytes < kPageClassBytes ? kSmallGranule : kPageGranule;
  return (bytes + granule - 1) / granule * granule;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  auto [p, granted] = take_cached_locked(size);
  if (!p) {
    granted = size;
    evict_to_bound_locked(static_cast<int64_t>(size));  // room for the new block first
    p = raw_alloc_(size);
    if (!p) {  // pressure: give back everything cached and try once more
      release_cache_locked();
      p = raw_alloc_(size);
    }
    if (!p) throw std::bad_alloc();
    ++stats_.system_allocations;
  }
  live_.emplace(p, granted);
  stats_.current_bytes += static_cast<int64_t>(granted);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.high_water_bytes = std::max(stats_.high_water_bytes, stats_.current_bytes);
  return p;
}

void CachingAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  TARN_ASSERT(it != live_.end(), "allocator: freeing a block it did not give out");
  const size_t size = it->second;
  TARN_ASSERT(rounded_size(bytes) <= size, "allocator: freeing ", bytes, " bytes from a block of ", size);
  live_.erase(it);
  stats_.current_bytes -= static_cast<int64_t>(size);
  const uint64_t t = ++clock_;
  by_size_.emplace(size, ~t, p);
  by_age_.emplace(t, size, p);
  stats_.cached_bytes += static_cast<int64_t>(size);
  evict_to_bound_locked(0);
}

std::pair<void*, size_t> CachingAllocator::take_cached_locked(size_t size) {
  auto it = by_size_.lower_bound({size, 0, nullptr});
  if (it == by_size_.end()) return {nullptr, 0};
  const auto [block, recency, p] = *it;
  if (block > size + size / 4) return {nullptr, 0};  // too loose a fit: the slack would count as live
  by_size_.erase(it);
  by_age_.erase({~recency, block, p});
  stats_.cached_bytes -= static_cast<int64_t>(block);
  return {p, block};
}

void CachingAllocator::evict_to_bound_locked(int64_t incoming) {
  const int64_t live = stats_.current_bytes + incoming;
  const int64_t high_water = std::max(stats_.high_water_bytes, live);
  const int64_t bound =
      std::max(static_cast<int64_t>(kCacheBoundRatio * static_cast<double>(high_water)), live + kCacheFloorBytes);
  while (!by_age_.empty() && live + stats_.cached_bytes > bound) {
    const auto [freed_at, size, p] = *by_age_.begin();
    by_age_.erase(by_age_.begin());
    by_size_.erase({size, ~freed_at, p});
    stats_.cached_bytes -= static_cast<int64_t>(size);
    ++stats_.evictions;
    raw_free_(p, size);
  }
}

void CachingAllocator::release_cache_locked() {
  for (const auto& [size, recency, p] : by_size_) raw_free_(p, size);
  by_size_.clear();
  by_age_.clear();
  stats_.cached_bytes = 0;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.current_bytes;
}

void CachingAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cache_locked();
}

}  // namespace tarn
