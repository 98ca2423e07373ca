#include "framework/ops/shape_ops.h"

#include <numeric>
#include <sstream>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/layout.h"

namespace tarn {
namespace {

using ops_internal::kernels_for;

// Product of the extents before / after `axis`.
int64_t outer_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = 0; d < axis; ++d) n *= s[d];
  return n;
}
int64_t inner_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = axis + 1; d < s.size(); ++d) n *= s[d];
  return n;
}

std::string order_str(const std::vector<int>& order) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < order.size(); ++i) os << (i ? ", " : "") << order[i];
  os << ")";
  return os.str();
}

// dst = x permuted by `order` (no autograd).
Tensor permuted(const Tensor& x, const std::vector<int>& order) {
  std::vector<int64_t> dims(order.size());
  for (size_t k = 0; k < order.size(); ++k) dims[k] = x.shape()[order[k]];
  const kernels::Backend& k = kernels_for("permute", x);
  Tensor y = Tensor::empty(Shape(dims), x.device());
  const std::vector<int64_t> extents = x.shape().vec();
  k.permute(x.device_f32(), y.device_f32(), extents.data(), order.data(), x.dim());
  return y;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  int unknown = 0;
  int64_t known = 1;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1)
      ++unknown;
    else
      known *= shape[d];
  }
  const bool fits = unknown == 0 ? known == x.numel() : unknown == 1 && known > 0 && x.numel() % known == 0;
  TARN_ASSERT(fits, "reshape: cannot reshape ", x.shape().str(), " (", x.numel(), " elements) into ", shape.str());
  Tensor y = x.view(shape);
  const Shape xs = x.shape();
  return record("reshape", y, {x}, [xs](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy.view(xs)}; });
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  kernels_for("permute", x);
  const int n = x.dim();
  std::vector<int> resolved(order.size());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  bool valid = static_cast<int>(order.size()) == n;
  for (size_t k = 0; valid && k < order.size(); ++k) {
    const int a = order[k] < 0 ? order[k] + n : order[k];
    valid = a >= 0 && a < n && !seen[a];
    if (valid) seen[a] = true;
    resolved[k] = a;
  }
  TARN_ASSERT(valid, "permute: order ", order_str(order), " is not a permutation of the axes of shape ",
              x.shape().str());
  Tensor y = permuted(x, resolved);
  std::vector<int> inverse(resolved.size());
  for (size_t k = 0; k < resolved.size(); ++k) inverse[resolved[k]] = static_cast<int>(k);
  return record("permute", y, {x}, [inverse](const Tensor& dy, const NeedsGrad&) -> Grads {
    return {permuted(dy, inverse)};
  });
}

Tensor transpose(const Tensor& x, int axis0, int axis1) {
  const int a = x.shape().axis(axis0, "transpose"), b = x.shape().axis(axis1, "transpose");
  std::vector<int> order(static_cast<size_t>(x.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[a], order[b]);
  return permute(x, order);
}

Tensor concat(const std::vector<Tensor>& xs, int axis_arg) {
  constexpr const char* kOp = "concat";
  TARN_ASSERT(!xs.empty(), kOp, ": no tensors given");
  const kernels::Backend& k = kernels_for(kOp, xs[0]);
  for (const Tensor& x : xs) {
    ops_internal::check_f32(kOp, x);
    ops_internal::check_same_device(kOp, xs[0], x);
  }
  const Shape& first = xs[0].shape();
  const int axis = first.axis(axis_arg, kOp);
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& s = xs[i].shape();
    bool match = s.size() == first.size();
    for (int d = 0; match && d < s.size(); ++d) match = d == axis || s[d] == first[d];
    TARN_ASSERT(match, kOp, ": shapes ", first.str(), " and ", s.str(), " (input ", i,
                ") differ outside axis ", axis);
    total += s[axis];
  }
  Shape out_shape = first;
  out_shape[axis] = total;
  Tensor y = Tensor::empty(out_shape, xs[0].device());
  const int64_t outer = outer_of(first, axis), inner = inner_of(first, axis);
  std::vector<int64_t> offsets;  // start of each input along the axis
  int64_t at = 0;
  for (const Tensor& x : xs) {
    offsets.push_back(at);
    const int64_t len = x.shape()[axis] * inner;
    k.copy_rows(x.device_f32(), len, y.device_f32() + at * inner, total * inner, outer, len);
    at += x.shape()[axis];
  }
  std::vector<Shape> shapes;
  for (const Tensor& x : xs) shapes.push_back(x.shape());
  return record(kOp, y, xs,
                [shapes, offsets, axis, outer, inner, total](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const kernels::Backend& kb = kernels_for("concat", dy);
                  Grads g(shapes.size());
                  for (size_t i = 0; i < shapes.size(); ++i) {
                    if (!needs[i]) continue;
                    g[i] = Tensor::empty(shapes[i], dy.device());
                    const int64_t len = shapes[i][axis] * inner;
                    kb.copy_rows(dy.device_f32() + offsets[i] * inner, total * inner, g[i].device_f32(), len, outer,
                                 len);
                  }
                  return g;
                });
}

Tensor slice(const Tensor& x, int axis_arg, int64_t begin, int64_t end) {
  constexpr const char* kOp = "slice";
  const kernels::Backend& k = kernels_for(kOp, x);
  const int axis = x.shape().axis(axis_arg, kOp);
  const int64_t extent = x.shape()[axis];
  TARN_ASSERT(0 <= begin && begin <= end && end <= extent, kOp, ": [", begin, ", ", end, ") is out of range for axis ",
              axis, " of shape ", x.shape().str());
  Shape out_shape = x.shape();
  out_shape[axis] = end - begin;
  Tensor y = Tensor::empty(out_shape, x.device());
  const int64_t outer = outer_of(x.shape(), axis), inner = inner_of(x.shape(), axis);
  const int64_t len = (end - begin) * inner;
  k.copy_rows(x.device_f32() + begin * inner, extent * inner, y.device_f32(), len, outer, len);
  const Shape xs = x.shape();
  return record(kOp, y, {x}, [xs, outer, inner, extent, begin, len](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = kernels_for("slice", dy);
    Tensor dx = Tensor::zeros(xs, dy.device());
    kb.copy_rows(dy.device_f32(), len, dx.device_f32() + begin * inner, extent * inner, outer, len);
    return {dx};
  });
}

Tensor to_device(const Tensor& x, Device device) {
  TARN_ASSERT(x.defined(), "to_device: undefined tensor");
  if (x.device() == device) return x;
  const Device from = x.device();
  return record("to_device", x.to(device), {x},
                [from](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy.to(from)}; });
}

}  // namespace tarn
