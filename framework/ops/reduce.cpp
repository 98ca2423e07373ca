#include "framework/ops/reduce.h"

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/reduce_internal.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace tarn {
namespace {

using ops_internal::kernels_for;

// x seen as (outer, n, inner) around `axis`.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit a;
  for (int d = 0; d < s.size(); ++d) {
    if (d < axis) a.outer *= s[d];
    if (d == axis) a.n = s[d];
    if (d > axis) a.inner *= s[d];
  }
  return a;
}

Shape reduced_shape(const Shape& s, int axis, bool keepdim) {
  std::vector<int64_t> dims = s.vec();
  if (keepdim)
    dims[axis] = 1;
  else
    dims.erase(dims.begin() + axis);
  return Shape(dims);
}

Tensor reduce_axis(const char* name, const Tensor& x, int axis_arg, bool keepdim, bool average) {
  const kernels::Backend& k = kernels_for(name, x);
  const int axis = x.shape().axis(axis_arg, name);
  const AxisSplit sp = split_at(x.shape(), axis);
  const float alpha = average ? (sp.n > 0 ? 1.0f / static_cast<float>(sp.n) : NAN) : 1.0f;
  Tensor y = Tensor::empty(reduced_shape(x.shape(), axis, keepdim), x.device());
  k.sum_axis(x.device_f32(), y.device_f32(), sp.outer, sp.n, sp.inner, alpha);
  const Shape xs = x.shape();
  return record(name, y, {x}, [name, xs, sp, alpha](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = kernels_for(name, dy);
    Tensor dx = Tensor::empty(xs, dy.device());
    kb.broadcast_axis(dy.device_f32(), dx.device_f32(), sp.outer, sp.n, sp.inner, alpha);
    return {dx};
  });
}

Tensor reduce_all(const char* name, const Tensor& x, bool average) {
  const kernels::Backend& k = kernels_for(name, x);
  const int64_t n = x.numel();
  const double total = k.sum_all(x.device_f32(), n);
  const float alpha = average ? 1.0f / static_cast<float>(n) : 1.0f;  // n == 0: inf * 0 = NaN, as 0/0
  // The total came back to the host (sum_all returns it); the result lives with x.
  Tensor y = Tensor::full(Shape{}, static_cast<float>(average ? total / static_cast<double>(n) : total), x.device());
  const Shape xs = x.shape();
  return record(name, y, {x}, [xs, alpha](const Tensor& dy, const NeedsGrad&) -> Grads {
    return {Tensor::full(xs, alpha * dy.item(), dy.device())};
  });
}

}  // namespace

Tensor sum(const Tensor& x, int axis, bool keepdim) { return reduce_axis("sum", x, axis, keepdim, false); }
Tensor mean(const Tensor& x, int axis, bool keepdim) { return reduce_axis("mean", x, axis, keepdim, true); }
Tensor sum_all(const Tensor& x) { return reduce_all("sum_all", x, false); }
Tensor mean_all(const Tensor& x) { return reduce_all("mean_all", x, true); }

namespace ops_internal {

Tensor sum_to_shape(const Tensor& g, const Shape& target, float alpha) {
  const Shape& gs = g.shape();
  const kernels::Backend& k = kernels_for("sum_to_shape", g);
  if (gs == target) {
    if (alpha == 1.0f) return g;
    Tensor out = Tensor::empty(target, g.device());
    k.unary(kernels::cpu::Unary::scale, g.device_f32(), out.device_f32(), g.numel(), alpha);
    return out;
  }
  // Label each of g's axes kept (K) or summed (S, where target has extent 1 or no axis), drop
  // extent-1 axes and merge neighbours of one kind: g becomes (K S K S ...) groups.
  struct Group {
    int64_t extent;
    bool summed;
  };
  std::vector<Group> groups;
  const int lead = gs.size() - target.size();
  for (int d = 0; d < gs.size(); ++d) {
    if (gs[d] == 1) continue;
    const bool summed = d < lead || target[d - lead] == 1;
    if (!groups.empty() && groups.back().summed == summed)
      groups.back().extent *= gs[d];
    else
      groups.push_back({gs[d], summed});
  }
  // One sum_axis pass per summed group, outermost first; alpha is applied by the first pass.
  Tensor cur = g;
  bool first = true;
  for (size_t j = 0; j < groups.size();) {
    if (!groups[j].summed) {
      ++j;
      continue;
    }
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < j; ++k) outer *= groups[k].extent;
    for (size_t k = j + 1; k < groups.size(); ++k) inner *= groups[k].extent;
    Tensor next = Tensor::empty(Shape{outer * inner}, g.device());
    k.sum_axis(cur.device_f32(), next.device_f32(), outer, groups[j].extent, inner, first ? alpha : 1.0f);
    first = false;
    cur = next;
    groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(j));
    if (j > 0 && j < groups.size()) {  // the kept neighbours now touch: merge them
      groups[j - 1].extent *= groups[j].extent;
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
  if (first) {  // only extent-1 axes differed (e.g. (3, 1) to (3,)): nothing to sum
    if (alpha == 1.0f) return g.view(target);
    Tensor out = Tensor::empty(target, g.device());
    k.unary(kernels::cpu::Unary::scale, g.device_f32(), out.device_f32(), g.numel(), alpha);
    return out;
  }
  return cur.view(target);
}

}  // namespace ops_internal
}  // namespace tarn
