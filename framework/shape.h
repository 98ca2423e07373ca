#pragma once
// A tensor shape: up to kMaxDims extents, stored inline (no heap allocation per tensor).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tarn {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int size() const { return ndim_; }  // number of dimensions
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  // Accepts negative axes (-1 = last); throws naming `op` when out of range.
  int axis(int a, const char* op = "axis") const;
  int64_t back() const { return dims_[ndim_ - 1]; }
  std::vector<int64_t> vec() const { return {dims_.begin(), dims_.begin() + ndim_}; }
  std::string str() const;  // "(2, 3, 4)"

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

}  // namespace tarn
