#include "framework/ops/delta_rule.h"

#include "framework/autograd.h"
#include "framework/backend.h"
#include "framework/ops/elementwise_internal.h"

namespace tarn {
namespace {

namespace kc = kernels::cpu;

// Checks the operands and returns the kernel's dims; q may be undefined (state only).
kc::DeltaRuleDims check_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                 const Tensor& alpha) {
  for (const Tensor* t : {&q, &v, &beta, &alpha})
    if (t->defined()) {
      ops_internal::check_f32(op, *t);
      ops_internal::check_same_device(op, k, *t);
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

const float* data_or_null(const Tensor& t) { return t.defined() ? t.device_f32() : nullptr; }

// The scan's inputs as record() takes them: [q,] k, v, beta, alpha (q only with a readout).
std::vector<Tensor> scan_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                                const Tensor& alpha) {
  std::vector<Tensor> inputs = {k, v, beta, alpha};
  if (q.defined()) inputs.insert(inputs.begin(), q);
  return inputs;
}

// The backward's gradients in scan_inputs' order, undefined where no gradient is wanted.
Grads in_input_order(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbeta, const Tensor& dalpha,
                     const NeedsGrad& needs) {
  Grads g = {dk, dv, dbeta, dalpha};
  if (dq.defined()) g.insert(g.begin(), dq);
  for (size_t i = 0; i < g.size(); ++i)
    if (!needs[i]) g[i] = Tensor();
  return g;
}

// The bf16 scan (precision bf16 where the device has the kernels): q, k, v rounded to bf16 and
// kept for the backward (half the bytes of f32 copies), out rounded by the kernel and widened to
// f32 for the graph; the state-only scan's output, the final state, is f32 already. Backward
// rounds dy (d_out) the same way, and widens dq, dk, dv; d_beta and d_alpha are f32.
Tensor scan_in_bf16(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta,
                    const Tensor& alpha, const kc::DeltaRuleDims& dims, const kc::DeltaRuleConfig& cfg) {
  const bool readout = q.defined();
  const int64_t B = k.size(0), H = k.size(1);
  const Device dev = k.device();
  const kernels::DeltaRuleBf16Kernels& kb = *backend_for(dev).delta_rule_bf16;
  const Tensor q16 = readout ? ops_internal::rounded_to_bf16(op, q) : Tensor();
  const Tensor k16 = ops_internal::rounded_to_bf16(op, k), v16 = ops_internal::rounded_to_bf16(op, v);
  Tensor out16 = readout ? Tensor::empty(v.shape(), dev, DType::bf16) : Tensor();
  Tensor state = readout ? Tensor() : Tensor::empty(Shape{B, H, dims.dk, dims.dv}, dev);
  Tensor checkpoints =
      Tensor::empty(Shape{dims.slices, kc::delta_rule_checkpoints(dims, cfg), dims.dk, dims.dv}, dev);
  {  // the forward's workspace (each sub-chunk's factors and starting state) is freed on return
    const size_t ws_floats = kb.forward_workspace_floats(dims, cfg);
    Tensor ws = Tensor::empty(Shape{static_cast<int64_t>(ws_floats)}, dev);
    kb.forward(dims, cfg, readout ? q16.data<bf16>() : nullptr, k16.data<bf16>(), v16.data<bf16>(),
               beta.device_f32(), alpha.device_f32(), readout ? out16.data<bf16>() : nullptr,
               readout ? nullptr : state.device_f32(), checkpoints.device_f32(), ws.device_f32(), ws_floats);
  }
  const Tensor out = readout ? ops_internal::widened_to_f32(op, out16) : state;
  return record(op, out, scan_inputs(q, k, v, beta, alpha),
                [=](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const kernels::DeltaRuleBf16Kernels& kd = *backend_for(dev).delta_rule_bf16;
                  ops_internal::check_same_device(op, k, dy);
                  const Tensor dy16 = readout ? ops_internal::rounded_to_bf16(op, dy) : Tensor();
                  Tensor dq = readout ? Tensor::empty(q.shape(), dev, DType::bf16) : Tensor();
                  Tensor dk = Tensor::empty(k.shape(), dev, DType::bf16);
                  Tensor dv = Tensor::empty(v.shape(), dev, DType::bf16);
                  Tensor dbeta = Tensor::empty(beta.shape(), dev), dalpha = Tensor::empty(alpha.shape(), dev);
                  const size_t ws_floats = kd.backward_workspace_floats(dims, cfg);
                  Tensor ws = Tensor::empty(Shape{static_cast<int64_t>(ws_floats)}, dev);
                  kd.backward(dims, cfg, readout ? q16.data<bf16>() : nullptr, k16.data<bf16>(), v16.data<bf16>(),
                              beta.device_f32(), alpha.device_f32(), checkpoints.device_f32(),
                              readout ? dy16.data<bf16>() : nullptr, readout ? nullptr : dy.device_f32(),
                              readout ? dq.data<bf16>() : nullptr, dk.data<bf16>(), dv.data<bf16>(),
                              dbeta.device_f32(), dalpha.device_f32(), ws.device_f32(), ws_floats);
                  return in_input_order(readout ? ops_internal::widened_to_f32(op, dq) : Tensor(),
                                        ops_internal::widened_to_f32(op, dk), ops_internal::widened_to_f32(op, dv),
                                        dbeta, dalpha, needs);
                });
}

// The forward of both ops and a backward recorded on `out`: with q the readout, else the state.
Tensor scan(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& alpha,
            const DeltaRuleOptions& opt) {
  const kernels::Backend& kb = ops_internal::kernels_for(op, k);
  const kc::DeltaRuleDims dims = check_operands(op, q, k, v, beta, alpha);
  const kc::DeltaRuleConfig cfg{opt.reverse, opt.chunk, opt.erase};
  TARN_ASSERT(opt.chunk >= 1, op, ": chunk must be >= 1, got ", opt.chunk);
  if (opt.precision == Precision::bf16 && delta_rule_runs_in_bf16(k.device(), dims.dk, dims.dv, opt.chunk))
    return scan_in_bf16(op, q, k, v, beta, alpha, dims, cfg);
  const bool readout = q.defined();
  const int64_t B = k.size(0), H = k.size(1);
  const Device dev = k.device();
  Tensor out = readout ? Tensor::empty(v.shape(), dev) : Tensor::empty(Shape{B, H, dims.dk, dims.dv}, dev);
  Tensor checkpoints =
      Tensor::empty(Shape{dims.slices, kc::delta_rule_checkpoints(dims, cfg), dims.dk, dims.dv}, dev);
  kb.delta_rule_forward(dims, cfg, data_or_null(q), k.device_f32(), v.device_f32(), beta.device_f32(),
                        alpha.device_f32(), readout ? out.device_f32() : nullptr, readout ? nullptr : out.device_f32(),
                        checkpoints.device_f32());
  return record(op, out, scan_inputs(q, k, v, beta, alpha),
                [=](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const kernels::Backend& kd = ops_internal::kernels_for(op, k, dy);
                  Tensor dq = readout ? Tensor::empty(q.shape(), dev) : Tensor();
                  Tensor dk = Tensor::empty(k.shape(), dev), dv = Tensor::empty(v.shape(), dev);
                  Tensor dbeta = Tensor::empty(beta.shape(), dev), dalpha = Tensor::empty(alpha.shape(), dev);
                  const size_t ws_floats = kd.delta_rule_backward_workspace_floats(dims, cfg);
                  Tensor ws = Tensor::empty(Shape{static_cast<int64_t>(ws_floats)}, dev);
                  kd.delta_rule_backward(dims, cfg, data_or_null(q), k.device_f32(), v.device_f32(),
                                         beta.device_f32(), alpha.device_f32(), checkpoints.device_f32(),
                                         readout ? dy.device_f32() : nullptr, readout ? nullptr : dy.device_f32(),
                                         readout ? dq.device_f32() : nullptr, dk.device_f32(), dv.device_f32(),
                                         dbeta.device_f32(), dalpha.device_f32(), ws.device_f32(), ws_floats);
                  return in_input_order(dq, dk, dv, dbeta, dalpha, needs);
                });
}

}  // namespace

bool delta_rule_runs_in_bf16(Device device, int64_t dk, int64_t dv, int64_t chunk) {
  const kernels::DeltaRuleBf16Kernels* k = backend_for(device).delta_rule_bf16;
  return k && dk > 0 && dv > 0 && chunk >= 1 && k->sub_chunk({1, 1, dk, dv}, {false, chunk, true}) > 0;
}

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
  const kernels::Backend& kb = ops_internal::kernels_for(op, state);
  for (const Tensor* t : {&q, &k, &v, &beta, &alpha}) {
    ops_internal::check_f32(op, *t);
    ops_internal::check_same_device(op, state, *t);
  }
  const int64_t B = k.size(0), H = k.size(1), dk = k.shape().back(), dv = v.shape().back();
  TARN_ASSERT(q.numel() == B * H * dk && k.numel() == B * H * dk && v.numel() == B * H * dv &&
                  beta.numel() == B * H && alpha.numel() == B * H,
              op, ": expected q, k (B, H, dk), v (B, H, dv), beta, alpha (B, H); got q ", q.shape().str(), " k ",
              k.shape().str(), " v ", v.shape().str(), " beta ", beta.shape().str());
  TARN_ASSERT(state.shape() == Shape({B, H, dk, dv}), op, ": state must be (", B, ", ", H, ", ", dk, ", ", dv,
              "), got ", state.shape().str());
  Tensor out = Tensor::empty(Shape{B, H, dv}, state.device());
  kb.delta_rule_step(B * H, dk, dv, state.device_f32(), q.device_f32(), k.device_f32(), v.device_f32(),
                     beta.device_f32(), alpha.device_f32(), out.device_f32(), erase);
  return out;
}

void set_delta_rule_algorithm(Device device, kernels::DeltaRuleAlgorithm algorithm) {
  backend_for(device).delta_rule_set_algorithm(algorithm);
}

}  // namespace tarn
