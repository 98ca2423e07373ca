#include "framework/ops/delta_rule.h"

#include "framework/autograd.h"
#include "framework/ops/elementwise_internal.h"

namespace tarn {
namespace {

namespace kc = kernels::cpu;

// Checks the operands and returns the kernel's dims; q may be undefined (state only).
kc::DeltaRuleDims check_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                 const Tensor& alpha) {
  for (const Tensor* t : {&q, &k, &v, &beta, &alpha}) {
    if (!t->defined()) continue;
    ops_internal::check_f32(op, *t);
    TARN_ASSERT(t->device().is_cpu(), op, ": the gated delta rule has a CPU kernel only, got a tensor on ",
                t->device().str());
  }
  TARN_ASSERT(k.dim() == 4 && v.dim() == 4 && beta.dim() == 3 && alpha.dim() == 3, op,
              ": expected k, v (B, H, N, dim) and beta, alpha (B, H, N), got k ", k.shape().str(), " v ",
              v.shape().str(), " beta ", beta.shape().str(), " alpha ", alpha.shape().str());
  const int64_t B = k.size(0), H = k.size(1), N = k.size(2);
  const Shape rows{B, H, N};
  TARN_ASSERT(v.size(0) == B && v.size(1) == H && v.size(2) == N && beta.shape() == rows && alpha.shape() == rows,
              op, ": shapes differ: k ", k.shape().str(), " v ", v.shape().str(), " beta ", beta.shape().str(),
              " alpha ", alpha.shape().str());
  TARN_ASSERT(!q.defined() || q.shape() == k.shape(), op, ": q ", q.defined() ? q.shape().str() : "", " must be k's ",
              k.shape().str());
  return {B * H, N, k.size(3), v.size(3)};
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.f32() : nullptr; }

// The forward of both ops and a backward recorded on `out`: with q the readout, else the state.
Tensor scan(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
            const DeltaRuleOptions& opt) {
  const kc::DeltaRuleDims dims = check_operands(op, q, k, v, beta, alpha);
  const kc::DeltaRuleConfig cfg{opt.reverse, opt.chunk, opt.erase};
  TARN_ASSERT(opt.chunk >= 1, op, ": chunk must be >= 1, got ", opt.chunk);
  const bool readout = q.defined();
  const int64_t B = k.size(0), H = k.size(1);
  Tensor out = readout ? Tensor::empty(v.shape()) : Tensor::empty(Shape{B, H, dims.dk, dims.dv});
  Tensor checkpoints = Tensor::empty(Shape{dims.slices, kc::delta_rule_checkpoints(dims, cfg), dims.dk, dims.dv});
  kc::delta_rule_forward(dims, cfg, data_or_null(q), k.f32(), v.f32(), beta.f32(), alpha.f32(),
                         readout ? out.f32() : nullptr, readout ? nullptr : out.f32(), checkpoints.f32());
  std::vector<Tensor> inputs = {k, v, beta, alpha};
  if (readout) inputs.insert(inputs.begin(), q);
  return record(op, out, inputs,
                [=](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  Tensor dq = readout ? Tensor::empty(q.shape()) : Tensor();
                  Tensor dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
                  Tensor dbeta = Tensor::empty(beta.shape()), dalpha = Tensor::empty(alpha.shape());
                  Tensor ws = Tensor::empty(Shape{static_cast<int64_t>(kc::delta_rule_backward_workspace_floats(dims, cfg))});
                  kc::delta_rule_backward(dims, cfg, data_or_null(q), k.f32(), v.f32(), beta.f32(), alpha.f32(),
                                          checkpoints.f32(), readout ? dy.f32() : nullptr, readout ? nullptr : dy.f32(),
                                          readout ? dq.f32() : nullptr, dk.f32(), dv.f32(), dbeta.f32(),
                                          dalpha.f32(), ws.f32(), static_cast<size_t>(ws.numel()));
                  Grads g = {dk, dv, dbeta, dalpha};
                  if (readout) g.insert(g.begin(), dq);
                  for (size_t i = 0; i < g.size(); ++i)
                    if (!needs[i]) g[i] = Tensor();
                  return g;
                });
}

}  // namespace

Tensor delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
                  const DeltaRuleOptions& opt) {
  TARN_ASSERT(q.defined(), "delta_rule: q is undefined");
  return scan("delta_rule", q, k, v, beta, alpha, opt);
}

Tensor delta_rule_state(const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
                        const DeltaRuleOptions& opt) {
  return scan("delta_rule_state", Tensor(), k, v, beta, alpha, opt);
}

Tensor delta_rule_step(Tensor& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                       const Tensor& alpha, bool erase) {
  const char* op = "delta_rule_step";
  const int64_t B = k.size(0), H = k.size(1), dk = k.shape().back(), dv = v.shape().back();
  TARN_ASSERT(q.numel() == B * H * dk && k.numel() == B * H * dk && v.numel() == B * H * dv &&
                  beta.numel() == B * H && alpha.numel() == B * H,
              op, ": expected q, k (B, H, dk), v (B, H, dv), beta, alpha (B, H); got q ", q.shape().str(), " k ",
              k.shape().str(), " v ", v.shape().str(), " beta ", beta.shape().str());
  TARN_ASSERT(state.defined() && state.shape() == Shape({B, H, dk, dv}), op, ": state must be (", B, ", ", H, ", ",
              dk, ", ", dv, ")");
  for (const Tensor* t : {static_cast<const Tensor*>(&state), &q, &k, &v, &beta, &alpha}) {
    ops_internal::check_f32(op, *t);
    TARN_ASSERT(t->device().is_cpu(), op, ": the gated delta rule has a CPU kernel only");
  }
  Tensor out = Tensor::empty(Shape{B, H, dv});
  kc::delta_rule_step(B * H, dk, dv, state.f32(), q.f32(), k.f32(), v.f32(), beta.f32(), alpha.f32(), out.f32(), erase);
  return out;
}

}  // namespace tarn
