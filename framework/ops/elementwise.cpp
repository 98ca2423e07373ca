#include "framework/ops/elementwise.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "framework/ops/reduce_internal.h"
#include "kernels/elementwise.h"

namespace tarn {
namespace {

using kernels::cpu::Binary;
using kernels::cpu::Unary;
using ops_internal::kernels_for;
using ops_internal::sum_to_shape;

// out = a op b with a and b broadcast to out's shape. Same shapes go straight to the flat
// loop; everything else through the kernel's axis merging, which turns the bias case
// ((..., D) op (D)) into its row loop and a scalar operand into a constant inner loop.
void launch(const kernels::Backend& k, Binary op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.shape() == b.shape())
    return k.binary(op, a.device_f32(), b.device_f32(), out.device_f32(), out.numel());
  int64_t as[Shape::kMaxDims], bs[Shape::kMaxDims], extents[Shape::kMaxDims];
  ops_internal::broadcast_strides(a.shape(), out.shape(), as);
  ops_internal::broadcast_strides(b.shape(), out.shape(), bs);
  for (int d = 0; d < out.dim(); ++d) extents[d] = out.shape()[d];
  k.binary_broadcast(op, a.device_f32(), as, b.device_f32(), bs, out.device_f32(), extents, out.dim());
}

Tensor apply(Binary op, const Tensor& a, const Tensor& b, const Shape& shape) {
  const kernels::Backend& k = kernels_for("binary op", a, b);
  Tensor out = Tensor::empty(shape, a.device());
  launch(k, op, a, b, out);
  return out;
}

Tensor binary_op(const char* name, Binary op, const Tensor& a, const Tensor& b) {
  const kernels::Backend& k = kernels_for(name, a, b);
  const Shape shape = broadcast_shape(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.device());
  launch(k, op, a, b, out);
  const Shape sa = a.shape(), sb = b.shape();
  switch (op) {
    case Binary::add:
      return record(name, out, {a, b}, [sa, sb](const Tensor& dy, const NeedsGrad& needs) -> Grads {
        return {needs[0] ? sum_to_shape(dy, sa) : Tensor(), needs[1] ? sum_to_shape(dy, sb) : Tensor()};
      });
    case Binary::sub:
      return record(name, out, {a, b}, [sa, sb](const Tensor& dy, const NeedsGrad& needs) -> Grads {
        return {needs[0] ? sum_to_shape(dy, sa) : Tensor(), needs[1] ? sum_to_shape(dy, sb, -1.0f) : Tensor()};
      });
    case Binary::mul: {
      Tensor ad = a.detach(), bd = b.detach();
      return record(name, out, {a, b}, [ad, bd](const Tensor& dy, const NeedsGrad& needs) -> Grads {
        Grads g(2);
        if (needs[0]) g[0] = sum_to_shape(apply(Binary::mul, dy, bd, dy.shape()), ad.shape());
        if (needs[1]) g[1] = sum_to_shape(apply(Binary::mul, dy, ad, dy.shape()), bd.shape());
        return g;
      });
    }
    case Binary::div: {
      // d(a/b)/db = -a/b^2 = -(1/b) out: with q = dy / b, da = q and db = -q out.
      Tensor bd = b.detach(), od = out;
      return record(name, out, {a, b}, [sa, bd, od](const Tensor& dy, const NeedsGrad& needs) -> Grads {
        Tensor q = apply(Binary::div, dy, bd, dy.shape());
        Grads g(2);
        if (needs[1]) g[1] = sum_to_shape(apply(Binary::mul, q, od, q.shape()), bd.shape(), -1.0f);
        if (needs[0]) g[0] = sum_to_shape(q, sa);
        return g;
      });
    }
  }
  return out;
}

// What a unary op's backward reads: nothing, its input, or its output.
enum class Saves { none, input, output };

Tensor unary_op(const char* name, Unary op, const Tensor& x, float s, Saves saves) {
  const kernels::Backend& k = kernels_for(name, x);
  Tensor y = Tensor::empty(x.shape(), x.device());
  k.unary(op, x.device_f32(), y.device_f32(), x.numel(), s);
  if (op == Unary::add_scalar)  // the gradient passes through unchanged
    return record(name, y, {x}, [](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy}; });
  // Saving the output means saving y itself (not the recorded handle, which would own the node).
  Tensor saved = saves == Saves::input ? x.detach() : saves == Saves::output ? y : Tensor();
  return record(name, y, {x}, [name, op, s, saves, saved](const Tensor& dy, const NeedsGrad&) -> Grads {
    const kernels::Backend& kb = kernels_for(name, dy);
    Tensor dx = Tensor::empty(dy.shape(), dy.device());
    const float* in = saves == Saves::input ? saved.device_f32() : nullptr;
    const float* out = saves == Saves::output ? saved.device_f32() : nullptr;
    kb.unary_backward(op, in, out, dy.device_f32(), dx.device_f32(), dy.numel(), s);
    return {dx};
  });
}

}  // namespace

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const int n = std::max(a.size(), b.size());
  std::vector<int64_t> dims(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    const int da = d - (n - a.size()), db = d - (n - b.size());
    const int64_t ea = da >= 0 ? a[da] : 1, eb = db >= 0 ? b[db] : 1;
    TARN_ASSERT(ea == eb || ea == 1 || eb == 1, op, ": shapes ", a.str(), " and ", b.str(), " do not broadcast");
    dims[d] = ea == 1 ? eb : ea;
  }
  return Shape(dims);
}

Tensor add(const Tensor& a, const Tensor& b) { return binary_op("add", Binary::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op("sub", Binary::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op("mul", Binary::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op("div", Binary::div, a, b); }

Tensor scale(const Tensor& x, float s) { return unary_op("scale", Unary::scale, x, s, Saves::none); }
Tensor add_scalar(const Tensor& x, float s) { return unary_op("add_scalar", Unary::add_scalar, x, s, Saves::none); }
Tensor neg(const Tensor& x) { return unary_op("neg", Unary::neg, x, 0.0f, Saves::none); }
Tensor exp(const Tensor& x) { return unary_op("exp", Unary::exp, x, 0.0f, Saves::output); }
Tensor log(const Tensor& x) { return unary_op("log", Unary::log, x, 0.0f, Saves::input); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", Unary::sqrt, x, 0.0f, Saves::output); }
Tensor relu(const Tensor& x) { return unary_op("relu", Unary::relu, x, 0.0f, Saves::output); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", Unary::tanh, x, 0.0f, Saves::output); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", Unary::sigmoid, x, 0.0f, Saves::output); }
Tensor silu(const Tensor& x) { return unary_op("silu", Unary::silu, x, 0.0f, Saves::input); }
Tensor softplus(const Tensor& x) { return unary_op("softplus", Unary::softplus, x, 0.0f, Saves::input); }

}  // namespace tarn
