#include "framework/ops/matmul.h"

#include <vector>

#include "framework/autograd.h"
#include "framework/backend.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"

namespace tarn {
namespace {

// An operand as the product reads it: the f32 tensor itself, or (bf16) its rounding to bf16 in
// a fresh tensor. Gradients round dC the same way, so every GEMM of a bf16 op is a bf16 GEMM.
Tensor operand(const Tensor& x, Precision p) {
  return p == Precision::f32 ? x : ops_internal::rounded_to_bf16("matmul", x);
}

// The kernel table for two operands of a product: f32, or bf16 as operand() made them.
const kernels::Backend& product_kernels(const Tensor& a, const Tensor& b) {
  ops_internal::check_same_device("matmul", a, b);
  return backend_for(a.device());
}

// gemm_batched on f32 operands, gemm_batched_bf16 on bf16 ones (both f32 C).
void gemm_call(const kernels::Backend& k, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,
               const Tensor& A, int64_t sa, const Tensor& B, int64_t sb, float beta, float* C, int64_t sc) {
  TARN_ASSERT(A.dtype() == B.dtype(), "matmul: operands of dtypes ", dtype_name(A.dtype()), " and ",
              dtype_name(B.dtype()));
  if (A.dtype() == DType::bf16)
    k.gemm_batched_bf16(ta, tb, batch, M, N, K, 1.0f, A.data<bf16>(), sa, B.data<bf16>(), sb, beta, C, sc);
  else
    k.gemm_batched(ta, tb, batch, M, N, K, 1.0f, A.device_f32(), sa, B.device_f32(), sb, beta, C, sc);
}

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
  const kernels::Backend& k = product_kernels(a, b);
  Tensor c = Tensor::empty(g.out, a.device());
  if (g.shared_b && !ta && g.batch > 1) {  // fold the batch into M: one large sgemm
    gemm_call(k, false, tb, 1, g.batch * g.M, g.N, g.K, a, 0, b, 0, 0.0f, c.device_f32(), 0);
  } else {
    gemm_call(k, ta, tb, g.batch, g.M, g.N, g.K, a, g.M * g.K, b, g.shared_b ? 0 : g.K * g.N, 0.0f, c.device_f32(),
              g.M * g.N);
  }
  return c;
}

// Gradient of a shared (2-D) b when a is batched: the per-batch products summed.
Tensor shared_b_grad(const Tensor& a, const Tensor& dc, const Shape& b_shape, bool ta, bool tb) {
  const int64_t K = ta ? a.size(-2) : a.size(-1), M = ta ? a.size(-1) : a.size(-2), N = dc.size(-1);
  const int64_t batch = a.numel() / (M * K);
  const kernels::Backend& k = product_kernels(a, dc);
  Tensor db = Tensor::empty(b_shape, a.device());
  if (!ta) {  // rows of a and dc line up across the batch: one sgemm over batch*M rows
    if (!tb) gemm_call(k, true, false, 1, K, N, batch * M, a, 0, dc, 0, 0.0f, db.device_f32(), 0);
    else gemm_call(k, true, false, 1, N, K, batch * M, dc, 0, a, 0, 0.0f, db.device_f32(), 0);
  } else {
    if (!tb) gemm_call(k, false, false, batch, K, N, M, a, M * K, dc, M * N, 0.0f, db.device_f32(), 0);
    else gemm_call(k, true, true, batch, N, K, M, dc, M * N, a, M * K, 0.0f, db.device_f32(), 0);
  }
  return db;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, Precision p) {
  const Tensor a = operand(a_in, p), b = operand(b_in, p);
  Tensor c = gemm(a, b, ta, tb);
  const bool shared_b = b.dim() == 2 && a.dim() > 2;
  return record("matmul", c, {a_in, b_in}, [a, b, ta, tb, shared_b, p](const Tensor& dc_in, const NeedsGrad& needs) -> Grads {
    const Tensor dc = operand(dc_in, p);
    Grads g(2);
    // With A' = op(A), B' = op(B): dA' = dC B'ᵀ and dB' = A'ᵀ dC, transposed back where needed.
    if (needs[0]) {
      if (!ta) {
        g[0] = gemm(dc, b, false, !tb);
      } else if (!shared_b) {
        g[0] = gemm(b, dc, tb, true);
      } else {  // dA_i = B' dC_iᵀ with B' shared: a stride-0 left operand
        const int64_t K = a.size(-2), M = a.size(-1), N = dc.size(-1), batch = a.numel() / (M * K);
        const kernels::Backend& k = product_kernels(b, dc);
        g[0] = Tensor::empty(a.shape(), a.device());
        gemm_call(k, tb, true, batch, K, M, N, b, 0, dc, M * N, 0.0f, g[0].device_f32(), K * M);
      }
    }
    if (needs[1]) {
      if (shared_b) g[1] = shared_b_grad(a, dc, b.shape(), ta, tb);
      else g[1] = tb ? gemm(dc, a, true, ta) : gemm(a, dc, !ta, false);
    }
    return g;
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Precision p) {
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
  const Tensor xo = operand(x, p), wo = operand(weight, p);
  gemm_call(k, false, true, 1, rows, out, in, xo, 0, wo, 0, beta, y.device_f32(), 0);

  // The backward keeps the operands as the products read them (bf16 copies take half the bytes).
  return record("linear", y, {x, weight, bias},
                [xo, wo, rows, in, out, p](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    const kernels::Backend& k = ops_internal::kernels_for("linear", dy);
    const Tensor dyo = (needs[0] || needs[1]) ? operand(dy, p) : Tensor();
    Grads g(3);
    if (needs[0]) {  // dx = dy W
      g[0] = Tensor::empty(xo.shape(), xo.device());
      gemm_call(k, false, false, 1, rows, in, out, dyo, 0, wo, 0, 0.0f, g[0].device_f32(), 0);
    }
    if (needs[1]) {  // dW = dyᵀ x
      g[1] = Tensor::empty(wo.shape(), wo.device());
      gemm_call(k, true, false, 1, out, in, rows, dyo, 0, xo, 0, 0.0f, g[1].device_f32(), 0);
    }
    if (needs[2]) {  // db = the column sums of dy (deterministic at any thread count)
      g[2] = Tensor::empty(Shape{out}, dy.device());
      k.sum_axis(dy.device_f32(), g[2].device_f32(), 1, rows, out, 1.0f);
    }
    return g;
  });
}

}  // namespace tarn
