#include "framework/staging.h"

#include <climits>
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

namespace {

// The length of each of `rows` rows of `mask` (1 = padding) when every row is real positions
// then padding; empty when some row is not (or the rows do not divide the mask).
std::vector<int32_t> right_padded_lengths(const std::vector<uint8_t>& mask, int64_t rows) {
  const int64_t n = static_cast<int64_t>(mask.size());
  if (rows <= 0 || n % rows != 0 || n / rows > INT32_MAX) return {};
  const int64_t cols = n / rows;
  std::vector<int32_t> lengths(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = mask.data() + r * cols;
    int64_t len = 0;
    while (len < cols && !row[len]) ++len;
    for (int64_t c = len; c < cols; ++c)
      if (!row[c]) return {};  // a real position after padding
    lengths[static_cast<size_t>(r)] = static_cast<int32_t>(len);
  }
  return lengths;
}

}  // namespace

StagedBatch::StagedBatch(Device device, const std::vector<const std::vector<int32_t>*>& ids,
                         const std::vector<const std::vector<uint8_t>*>& masks, const std::vector<int64_t>& mask_rows)
    : device_(device) {
  if (device.is_cpu()) return;
  const kernels::Backend& k = backend_for(device);
  if (!k.allocate_pinned) return;
  static_assert(sizeof(int32_t) == sizeof(float), "ids and lengths travel in an f32 buffer");
  // The copy: every id vector, each flags mask as its flags and complement, each right-padded
  // mask as its lengths. After it, on the device only, the masks built from lengths.
  int64_t floats = 0;
  for (const std::vector<int32_t>* v : ids) {
    ids_.push_back({v->data(), v->size(), floats});
    floats += static_cast<int64_t>(v->size());
  }
  struct FromLengths {
    size_t mask;
    std::vector<int32_t> lengths;
    int64_t at = 0;  // the lengths, in floats into the copy
  };
  std::vector<FromLengths> built;
  std::vector<bool> as_flags(masks.size(), true);
  for (size_t i = 0; i < masks.size(); ++i) {
    std::vector<int32_t> lengths =
        i < mask_rows.size() ? right_padded_lengths(*masks[i], mask_rows[i]) : std::vector<int32_t>();
    if (lengths.empty()) {
      masks_.push_back({masks[i]->data(), masks[i]->size(), floats});
      floats += 2 * static_cast<int64_t>(masks[i]->size());
    } else {
      as_flags[i] = false;
      masks_.push_back({masks[i]->data(), masks[i]->size(), 0});  // placed below
      built.push_back({i, std::move(lengths), floats});
      floats += static_cast<int64_t>(built.back().lengths.size());
    }
  }
  const int64_t copied = floats;
  for (FromLengths& b : built) {
    masks_[b.mask].offset = floats;
    floats += 2 * static_cast<int64_t>(masks[b.mask]->size());
  }
  if (floats == 0) return;
  const size_t bytes = static_cast<size_t>(copied) * sizeof(float);
  staged_ = Tensor::empty(Shape{floats}, device);

  if (copied > 0) {
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
      if (!as_flags[i]) continue;
      const std::vector<uint8_t>& m = *masks[i];
      float* flags = f + masks_[i].offset;
      float* keep = flags + m.size();
      for (size_t j = 0; j < m.size(); ++j) {
        flags[j] = m[j] ? 1.0f : 0.0f;
        keep[j] = m[j] ? 0.0f : 1.0f;
      }
    }
    for (const FromLengths& b : built)
      std::memcpy(f + b.at, b.lengths.data(), b.lengths.size() * sizeof(int32_t));
    k.copy_pinned_to_device(staged_.device_f32(), slot.data, bytes, device.index, &slot.event);
  }
  // On the stream the copy was queued on, so after it.
  float* base = staged_.device_f32();
  for (const FromLengths& b : built) {
    const int64_t rows = static_cast<int64_t>(b.lengths.size());
    const int64_t n = static_cast<int64_t>(masks[b.mask]->size());
    float* mask = base + masks_[b.mask].offset;
    k.padding_from_lengths(reinterpret_cast<const int32_t*>(base + b.at), rows, n / rows, mask, mask + n);
  }
  from_lengths_ = static_cast<int64_t>(built.size());
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
