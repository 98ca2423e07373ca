#include "framework/ops/matmul.h"

#include <vector>

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"

namespace tarn {
namespace {

struct GemmShape {
  int64_t batch, M, N, K;
  bool shared_b;   // b has no batch dims
  Shape out;
};

GemmShape gemm_shape(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  ops_internal::check_same_device(op, a, b);
  TARN_ASSERT(a.dim() >= 2 && b.dim() >= 2, op, ": operands need at least 2 dimensions, got ", a.shape().str(),
              " and ", b.shape().str());
  const int ra = a.dim(), rb = b.dim();
  GemmShape g{};
  g.M = ta ? a.size(-1) : a.size(-2);
  const int64_t ka = ta ? a.size(-2) : a.size(-1);
  const int64_t kb = tb ? b.size(-1) : b.size(-2);
  g.N = tb ? b.size(-2) : b.size(-1);
  TARN_ASSERT(ka == kb, op, ": inner dimensions differ: ", a.shape().str(), (ta ? "ᵀ" : ""), " x ", b.shape().str(),
              (tb ? "ᵀ" : ""));
  g.K = ka;
  g.shared_b = rb == 2;
  TARN_ASSERT(g.shared_b || ra == rb, op, ": batch dimensions differ: ", a.shape().str(), " and ", b.shape().str());
  g.batch = 1;
  std::vector<int64_t> out;
  for (int i = 0; i < ra - 2; ++i) {
    TARN_ASSERT(g.shared_b || a.shape()[i] == b.shape()[i], op, ": batch dimensions differ: ", a.shape().str(),
                " and ", b.shape().str());
    g.batch *= a.shape()[i];
    out.push_back(a.shape()[i]);
  }
  out.push_back(g.M);
  out.push_back(g.N);
  g.out = Shape(out);
  return g;
}

// The product without autograd: used by the forward and by both gradients.
Tensor gemm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const GemmShape g = gemm_shape("matmul", a, b, ta, tb);
  const kernels::Backend& k = ops_internal::kernels_for("matmul", a, b);
  Tensor c = Tensor::empty(g.out, a.device());
  if (g.shared_b && !ta && g.batch > 1) {  // fold the batch into M: one large sgemm
    k.gemm_batched(false, tb, 1, g.batch * g.M, g.N, g.K, 1.0f,
                   a.device_f32(), 0, b.device_f32(), 0, 0.0f, c.device_f32(), 0);
  } else {
    k.gemm_batched(ta, tb, g.batch, g.M, g.N, g.K, 1.0f, a.device_f32(), g.M * g.K, b.device_f32(),
                   g.shared_b ? 0 : g.K * g.N, 0.0f, c.device_f32(), g.M * g.N);
  }
  return c;
}

// Gradient of a shared (2-D) b when a is batched: the per-batch products summed.
Tensor shared_b_grad(const Tensor& a, const Tensor& dc, const Shape& b_shape, bool ta, bool tb) {
  const int64_t K = ta ? a.size(-2) : a.size(-1), M = ta ? a.size(-1) : a.size(-2), N = dc.size(-1);
  const int64_t batch = a.numel() / (M * K);
  const kernels::Backend& k = ops_internal::kernels_for("matmul", a, dc);
  Tensor db = Tensor::empty(b_shape, a.device());
  if (!ta) {  // rows of a and dc line up across the batch: one sgemm over batch*M rows
    if (!tb) k.gemm_batched(true, false, 1, K, N, batch * M, 1.0f,
                            a.device_f32(), 0, dc.device_f32(), 0, 0.0f, db.device_f32(), 0);
    else k.gemm_batched(true, false, 1, N, K, batch * M, 1.0f,
                        dc.device_f32(), 0, a.device_f32(), 0, 0.0f, db.device_f32(), 0);
  } else {
    if (!tb) k.gemm_batched(false, false, batch, K, N, M, 1.0f,
                            a.device_f32(), M * K, dc.device_f32(), M * N, 0.0f, db.device_f32(), 0);
    else k.gemm_batched(true, true, batch, N, K, M, 1.0f,
                        dc.device_f32(), M * N, a.device_f32(), M * K, 0.0f, db.device_f32(), 0);
  }
  return db;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor c = gemm(a, b, ta, tb);
  const bool shared_b = b.dim() == 2 && a.dim() > 2;
  return record("matmul", c, {a, b}, [a, b, ta, tb, shared_b](const Tensor& dc, const NeedsGrad& needs) -> Grads {
    Grads g(2);
    // With A' = op(A), B' = op(B): dA' = dC B'ᵀ and dB' = A'ᵀ dC, transposed back where needed.
    if (needs[0]) {
      if (!ta) {
        g[0] = gemm(dc, b, false, !tb);
      } else if (!shared_b) {
        g[0] = gemm(b, dc, tb, true);
      } else {  // dA_i = B' dC_iᵀ with B' shared: a stride-0 left operand
        const int64_t K = a.size(-2), M = a.size(-1), N = dc.size(-1), batch = a.numel() / (M * K);
        const kernels::Backend& k = ops_internal::kernels_for("matmul", b, dc);
        g[0] = Tensor::empty(a.shape(), a.device());
        k.gemm_batched(tb, true, batch, K, M, N, 1.0f,
                       b.device_f32(), 0, dc.device_f32(), M * N, 0.0f, g[0].device_f32(),
                                   K * M);
      }
    }
    if (needs[1]) {
      if (shared_b) g[1] = shared_b_grad(a, dc, b.shape(), ta, tb);
      else g[1] = tb ? gemm(dc, a, true, ta) : gemm(a, dc, !ta, false);
    }
    return g;
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TARN_ASSERT(weight.dim() == 2, "linear: weight must be (out, in), got ", weight.shape().str());
  TARN_ASSERT(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.shape().str(),
              " does not match weight ", weight.shape().str());
  const int64_t in = weight.size(1), out = weight.size(0), rows = x.numel() / in;
  std::vector<int64_t> out_dims = x.shape().vec();
  out_dims.back() = out;
  Tensor y = Tensor::empty(Shape(out_dims), x.device());
  const kernels::Backend& k = ops_internal::kernels_for("linear", x, weight);
  float beta = 0.0f;
  if (bias.defined()) {
    TARN_ASSERT(bias.dim() == 1 && bias.size(0) == out, "linear: bias ", bias.shape().str(), " does not match weight ",
                weight.shape().str());
    ops_internal::kernels_for("linear", x, bias);
    if (x.device().is_cpu()) {
      const float* pb = bias.f32();
      float* py = y.f32();
#pragma omp parallel for if (rows * out > (1 << 15))
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < out; ++j) py[r * out + j] = pb[j];
    } else {  // the bias in every row: a copy with a zero source stride
      k.copy_rows(bias.device_f32(), 0, y.device_f32(), out, rows, out);
    }
    beta = 1.0f;
  }
  k.gemm_batched(false, true, 1, rows, out, in, 1.0f, x.device_f32(), 0, weight.device_f32(), 0, beta,
                 y.device_f32(), 0);

  return record("linear", y, {x, weight, bias}, [x, weight, rows, in, out](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    const kernels::Backend& k = ops_internal::kernels_for("linear", x, dy);
    Grads g(3);
    if (needs[0]) {  // dx = dy W
      g[0] = Tensor::empty(x.shape(), x.device());
      k.gemm_batched(false, false, 1, rows, in, out, 1.0f,
                     dy.device_f32(), 0, weight.device_f32(), 0, 0.0f, g[0].device_f32(), 0);
    }
    if (needs[1]) {  // dW = dyᵀ x
      g[1] = Tensor::empty(weight.shape(), weight.device());
      k.gemm_batched(true, false, 1, out, in, rows, 1.0f,
                     dy.device_f32(), 0, x.device_f32(), 0, 0.0f, g[1].device_f32(), 0);
    }
    if (needs[2]) {  // db = the column sums of dy (deterministic at any thread count)
      g[2] = Tensor::empty(Shape{out}, dy.device());
      k.sum_axis(dy.device_f32(), g[2].device_f32(), 1, rows, out, 1.0f);
    }
    return g;
  });
}

}  // namespace tarn
