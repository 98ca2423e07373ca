#pragma once
// The k best of a stream of (score, index) candidates, best first: the higher score, and of equal
// scores the lower index, whatever order they are offered in. The routed choices (chunk_choose,
// and chunk_attention's within the chosen chunks) keep k = route_top or route_beam of a few
// hundred candidates: a sorted list rejects most of them with one compare against its worst,
// where std::partial_sort's heap took 11% of a tree's forward+backward at 16,384 keys. Worst case
// (every candidate better than all kept) O(k) a candidate.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace tarn::kernels::cpu {

class BestOf {
 public:
  explicit BestOf(int64_t k) : k_(k) { kept_.reserve(static_cast<size_t>(k) + 1); }

  void clear() { kept_.clear(); }
  int64_t size() const { return k_; }  // k: how many write() writes

  void offer(float score, int64_t index) {
    const Entry e{score, index};
    if (k_ <= 0 || (static_cast<int64_t>(kept_.size()) == k_ && !beats(e, kept_.back()))) return;
    kept_.insert(std::upper_bound(kept_.begin(), kept_.end(), e, beats), e);
    if (static_cast<int64_t>(kept_.size()) > k_) kept_.pop_back();
  }

  // out[0, k): the kept indices, best first, then -1 (fewer candidates than k).
  void write(float* out) const {
    for (int64_t t = 0; t < k_; ++t)
      out[t] = t < static_cast<int64_t>(kept_.size()) ? static_cast<float>(kept_[t].index) : -1.0f;
  }

 private:
  struct Entry {
    float score;
    int64_t index;
  };
  static bool beats(const Entry& a, const Entry& b) {
    return a.score > b.score || (a.score == b.score && a.index < b.index);
  }

  int64_t k_;
  std::vector<Entry> kept_;
};

}  // namespace tarn::kernels::cpu
