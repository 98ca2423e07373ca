#include "framework/staging.h"

#include <cstring>
#include <map>
#include <mutex>

#include "framework/backend.h"

namespace tarn {
namespace {

thread_local const StagedBatch* tl_active = nullptr;

// kPinnedSlots pinned buffers per device, used in turn. Never freed: a process's last
// cudaFreeHost could run after the CUDA runtime has gone (static destruction order).
struct PinnedSlot {
  void* data = nullptr;
  size_t capacity = 0;
  void* event = nullptr;  // behind the last copy from it, until waited for
};
struct PinnedRing {
  PinnedSlot slots[StagedBatch::kPinnedSlots];
  int next = 0;
};
std::mutex g_rings_mu;
std::map<int, PinnedRing>& rings() {
  static auto* r = new std::map<int, PinnedRing>();
  return *r;
}

size_t grown(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c *= 2;
  return c;
}

}  // namespace

StagedBatch::StagedBatch(Device device, const std::vector<const std::vector<int32_t>*>& ids,
                         const std::vector<const std::vector<uint8_t>*>& masks)
    : device_(device) {
  if (device.is_cpu()) return;
  const kernels::Backend& k = backend_for(device);
  if (!k.allocate_pinned) return;
  static_assert(sizeof(int32_t) == sizeof(float), "ids travel in an f32 buffer");
  int64_t floats = 0;
  for (const std::vector<int32_t>* v : ids) {
    ids_.push_back({v->data(), v->size(), floats});
    floats += static_cast<int64_t>(v->size());
  }
  for (const std::vector<uint8_t>* m : masks) {
    masks_.push_back({m->data(), m->size(), floats});
    floats += 2 * static_cast<int64_t>(m->size());
  }
  if (floats == 0) return;
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  staged_ = Tensor::empty(Shape{floats}, device);

  std::lock_guard<std::mutex> lock(g_rings_mu);
  PinnedRing& ring = rings()[device.index];
  PinnedSlot& slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % kPinnedSlots;
  k.finish_copy(slot.event);  // waits only if that copy is still queued
  slot.event = nullptr;
  if (slot.capacity < bytes) {
    k.deallocate_pinned(slot.data);
    slot.data = nullptr;
    slot.capacity = 0;
    slot.data = k.allocate_pinned(grown(bytes));
    slot.capacity = grown(bytes);
  }
  auto* f = static_cast<float*>(slot.data);
  for (size_t i = 0; i < ids.size(); ++i)
    if (!ids[i]->empty()) std::memcpy(f + ids_[i].offset, ids[i]->data(), ids[i]->size() * sizeof(int32_t));
  for (size_t i = 0; i < masks.size(); ++i) {
    const std::vector<uint8_t>& m = *masks[i];
    float* flags = f + masks_[i].offset;
    float* keep = flags + m.size();
    for (size_t j = 0; j < m.size(); ++j) {
      flags[j] = m[j] ? 1.0f : 0.0f;
      keep[j] = m[j] ? 0.0f : 1.0f;
    }
  }
  k.copy_pinned_to_device(staged_.device_f32(), slot.data, bytes, device.index, &slot.event);
  active_ = true;
  outer_ = tl_active;
  tl_active = this;
}

StagedBatch::~StagedBatch() {
  if (active_ && tl_active == this) tl_active = outer_;
}

const StagedBatch* StagedBatch::active() { return tl_active; }

Tensor StagedBatch::ids(const std::vector<int32_t>& host, Device device) const {
  if (!active_ || device != device_ || host.empty()) return Tensor();
  for (const Entry& e : ids_)
    if (e.host == host.data() && e.count == host.size())
      return staged_.narrow0(e.offset, e.offset + static_cast<int64_t>(e.count));
  return Tensor();
}

Tensor StagedBatch::mask(const std::vector<uint8_t>& host, bool keep, Device device) const {
  if (!active_ || device != device_ || host.empty()) return Tensor();
  for (const Entry& e : masks_)
    if (e.host == host.data() && e.count == host.size()) {
      const int64_t begin = e.offset + (keep ? static_cast<int64_t>(e.count) : 0);
      return staged_.narrow0(begin, begin + static_cast<int64_t>(e.count));
    }
  return Tensor();
}

}  // namespace tarn
