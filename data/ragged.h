#pragma once
// Ragged: many variable-length token sequences in one flat array plus row offsets. A corpus
// of 200k lines is two allocations instead of 200k, and rows are contiguous for copying.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/check.h"

namespace tarn {

// A read-only view of one row (C++17 has no std::span).
struct IdSpan {
  const int32_t* ptr = nullptr;
  size_t len = 0;

  const int32_t* begin() const { return ptr; }
  const int32_t* end() const { return ptr + len; }
  size_t size() const { return len; }
  bool empty() const { return len == 0; }
  int32_t operator[](size_t i) const { return ptr[i]; }
  std::vector<int32_t> to_vector() const { return {begin(), end()}; }
};

class Ragged {
 public:
  Ragged() : offsets_{0} {}

  size_t rows() const { return offsets_.size() - 1; }
  size_t total() const { return values_.size(); }
  size_t row_size(size_t i) const { return offsets_[i + 1] - offsets_[i]; }
  IdSpan row(size_t i) const {
    TARN_CHECK(i < rows(), "Ragged::row: row ", i, " out of range (", rows(), " rows)");
    return {values_.data() + offsets_[i], row_size(i)};
  }

  void reserve(size_t rows, size_t total) {
    offsets_.reserve(rows + 1);
    values_.reserve(total);
  }
  void push_back(IdSpan ids) { push_back(ids.begin(), ids.end()); }
  void push_back(const std::vector<int32_t>& ids) { push_back(ids.data(), ids.data() + ids.size()); }
  void push_back(const int32_t* first, const int32_t* last) {
    values_.insert(values_.end(), first, last);
    offsets_.push_back(values_.size());
  }
  // Appends every row of `other` (used to join per-thread results in order).
  void append(const Ragged& other) {
    for (size_t i = 0; i < other.rows(); ++i) push_back(other.row(i));
  }

 private:
  std::vector<int32_t> values_;
  std::vector<size_t> offsets_;  // rows() + 1 entries, offsets_[0] == 0
};

}  // namespace tarn
