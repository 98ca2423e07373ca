#include "framework/shape.h"

#include <sstream>

#include "kernels/check.h"

namespace tarn {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  TARN_ASSERT(static_cast<int>(dims.size()) <= kMaxDims, "shape: at most ", kMaxDims, " dimensions, got ",
              dims.size());
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) {
    // -1 is allowed only as "infer this extent" for view/reshape, which resolve it.
    TARN_ASSERT(dims[i] >= -1, "shape: negative extent ", dims[i], " in dimension ", i);
    dims_[i] = dims[i];
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

int Shape::axis(int a, const char* op) const {
  const int resolved = a < 0 ? a + ndim_ : a;
  TARN_ASSERT(resolved >= 0 && resolved < ndim_, op, ": axis ", a, " is out of range for shape ", str());
  return resolved;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ")";
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace tarn
