// Attention ops (framework/ops/attention.h): shape checks, Tensor workspaces, and the
// autograd records around the hand-written kernels. Each backward captures only what its
// kernel reads: the inputs, the output and the per-row normaliser (linear) or log-sum-exp
// (softmax), never an N x N or per-position d x e tensor.
#include "framework/ops/attention.h"

#include <atomic>
#include <vector>

#include "framework/autograd.h"
#include "framework/log/log.h"
#include "framework/ops/attention_composed.h"
#include "framework/ops/elementwise_internal.h"
#include "kernels/softmax_attention.h"

namespace tarn {

namespace kc = kernels::cpu;
using ops_internal::check_f32;
using ops_internal::check_same_device;

namespace {

Tensor workspace(size_t floats, Device device = Device::cpu()) {
  return Tensor::empty(Shape{static_cast<int64_t>(floats)}, device);
}

void check_rank4(const char* op, const char* name, const Tensor& t) {
  check_f32(op, t);
  TARN_ASSERT(t.dim() == 4, op, ": ", name, " must be (B, H, N, dim), got shape ", t.shape().str());
}

// (B, Nk) f32 mask on the inputs' device `at`, or null when undefined.
const float* mask_data(const char* op, const Tensor& mask, int64_t batch, int64_t n_k, const Tensor& at) {
  if (!mask.defined()) return nullptr;
  check_f32(op, mask);
  check_same_device(op, at, mask);
  TARN_ASSERT(mask.shape() == Shape({batch, n_k}), op, ": key_padding_mask must be (B, Nk) = (",
              batch, ", ", n_k, "), got shape ", mask.shape().str());
  return mask.device_f32();
}

// q/a: (B,H,Nq,d), k/b: (B,H,Nk,d), v: (B,H,Nk,e).
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  check_rank4(op, "queries", q);
  check_rank4(op, "keys", k);
  check_rank4(op, "values", v);
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  TARN_ASSERT(q.size(0) == k.size(0) && q.size(1) == k.size(1) && k.size(0) == v.size(0) &&
                 k.size(1) == v.size(1),
              op, ": batch and head extents differ: queries ", q.shape().str(), ", keys ",
              k.shape().str(), ", values ", v.shape().str());
  TARN_ASSERT(q.size(3) == k.size(3), op, ": queries ", q.shape().str(), " and keys ",
              k.shape().str(), " differ in feature dimension");
  TARN_ASSERT(k.size(2) == v.size(2), op, ": keys ", k.shape().str(), " and values ",
              v.shape().str(), " differ in sequence length");
  TARN_ASSERT(!causal || q.size(2) == k.size(2), op, ": causal attention needs as many queries as keys, got ",
              q.shape().str(), " and ", k.shape().str());
}

void warn_identity_once() {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    log::warn("attention",
              "the identity feature map degenerates linear attention to (weighted) mean pooling "
              "and its normaliser can reach zero; use it for ablations only");
}

}  // namespace

FeatureMap parse_feature_map(const std::string& name) {
  for (FeatureMap m : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::favor,
                       FeatureMap::identity})
    if (name == kc::feature_map_name(m)) return m;
  throw Error(str_cat("unknown feature map \"", name,
                      "\" (expected elu1, relu, exp, favor or identity)"));
}

// ---- FAVOR+ projection ----

Tensor draw_favor_projection(Philox& rng, int64_t m, int64_t d) {
  TARN_ASSERT(m > 0 && d > 0, "draw_favor_projection: m and d must be positive, got m=", m,
              " d=", d);
  std::vector<float> normals(kc::favor_projection_normal_count(m, d));
  for (float& x : normals) x = rng.normal();
  Tensor w = Tensor::empty(Shape{m, d});
  kc::favor_projection_from_normals(m, d, normals.data(), w.f32());
  return w;
}

void FavorProjection::draw() {
  Philox gen(rng);
  const Device device = w.defined() ? w.device() : Device::cpu();  // drawn on the host, kept where w was
  w = draw_favor_projection(gen, m, d).to(device);
  rng = gen.state();
  steps = 0;
}

bool FavorProjection::step() {
  ++steps;
  if (!w.defined() || (redraw_every > 0 && steps >= redraw_every)) {
    draw();
    return true;
  }
  return false;
}

// ---- feature maps ----

namespace {

// Whether linear attention on `device` applies `kind` in its kernel; when it does not, the
// op applies it first with feature_map(). The one place that decides it.
bool kernel_fuses(Device device, FeatureMap kind) { return backend_for(device).linear_attention_fuses(kind); }

}  // namespace

Tensor feature_map(const Tensor& x, FeatureMap kind, FeatureRole role, const Tensor& projection) {
  check_f32("feature_map", x);
  TARN_ASSERT(x.dim() >= 2, "feature_map: x must be (..., N, d), got shape ", x.shape().str());
  const int64_t d = x.shape().back();
  const int64_t rows = d ? x.numel() / d : 0;
  if (kind == FeatureMap::identity) warn_identity_once();
  TARN_ASSERT(!kernels::cpu::feature_map_is_learned(kind), "feature_map: ", kernels::cpu::feature_map_name(kind),
              " has a learned projection; the attention layer computes it (layers/attention/feature_map.h)");
  if (!x.device().is_cpu() && kind != FeatureMap::favor)
    return ops_internal::feature_map_off_host(x, kind, role, projection);
  if (kind != FeatureMap::favor) {
    Tensor y = Tensor::empty(x.shape());
    kc::feature_map_forward(kind, rows, d, x.f32(), y.f32());
    return record("feature_map", y, {x},
                  [x, kind, rows, d](const Tensor& dy, const NeedsGrad&) -> Grads {
                    Tensor dx = Tensor::empty(x.shape());
                    kc::feature_map_backward(kind, rows, d, x.f32(), dy.f32(), dx.f32());
                    return {dx};
                  });
  }
  TARN_ASSERT(projection.defined(), "feature_map: favor needs its (m, d) projection");
  check_f32("feature_map", projection);
  check_same_device("feature_map", x, projection);
  TARN_ASSERT(projection.dim() == 2 && projection.size(1) == d, "feature_map: favor projection must be (m, ",
              d, ") for inputs ", x.shape().str(), ", got ", projection.shape().str());
  const int64_t n = x.size(-2);
  const kc::FavorDims g{n ? rows / n : 0, n, d, projection.size(0)};
  const auto stab = role == FeatureRole::query ? kc::FavorStabilizer::per_row
                    : role == FeatureRole::key ? kc::FavorStabilizer::per_slice
                                               : kc::FavorStabilizer::none;
  std::vector<int64_t> out_shape = x.shape().vec();
  out_shape.back() = g.m;
  const Device dev = x.device();
  const kernels::Backend& k = backend_for(dev);
  Tensor y = Tensor::empty(Shape(out_shape), dev);
  k.favor_forward(g, stab, x.device_f32(), projection.device_f32(), y.device_f32());
  return record("feature_map_favor", y, {x},
                [x, y, w = projection, g, stab](const Tensor& dy, const NeedsGrad&) -> Grads {
                  const kernels::Backend& kb = ops_internal::kernels_for("feature_map", x, dy);
                  Tensor dx = Tensor::empty(x.shape(), x.device());
                  Tensor ws = workspace(kb.favor_backward_workspace_floats(g), x.device());
                  kb.favor_backward(g, stab, x.device_f32(), w.device_f32(), y.device_f32(), dy.device_f32(),
                                    dx.device_f32(), ws.device_f32(), ws.numel());
                  return {dx};
                });
}

// ---- linear attention ----

bool linear_attention_runs_in_bf16(Device device, int64_t d, int64_t e) {
  const kernels::LinearAttentionBf16Kernels* k = backend_for(device).linear_attention_bf16;
  return k && d <= k->max_dim && e <= k->max_dim;
}

namespace {

// Attention with precision bf16 on a device that has bf16 kernels (`table`: the backend's
// linear_attention_bf16 or softmax_attention_bf16; their forward and backward take the same
// arguments): the kernels read bf16 roundings of a, b, v (kept for backward: half the bytes of
// f32 copies) and write a bf16 out and an f32 per-row statistic (linear: the normaliser,
// softmax: lse); out is widened to f32 for the graph. Backward rounds dy the same way and widens
// the gradients.
template <typename Kernels, typename Dims, typename Config>
Tensor attention_in_bf16(const char* op, const Kernels* kernels::Backend::*table, const Tensor& a, const Tensor& b,
                         const Tensor& v, const Tensor& mask, const Dims& dims, const Config& cfg) {
  const Device dev = a.device();
  const Kernels& k = *(backend_for(dev).*table);
  const Tensor a16 = ops_internal::rounded_to_bf16(op, a), b16 = ops_internal::rounded_to_bf16(op, b),
               v16 = ops_internal::rounded_to_bf16(op, v);
  Tensor out16 = Tensor::empty(Shape{dims.batch, dims.heads, dims.n_q, dims.e}, dev, DType::bf16);
  Tensor stat = Tensor::empty(Shape{dims.batch, dims.heads, dims.n_q}, dev);
  {
    Tensor ws = workspace(k.forward_workspace_floats(dims, cfg), dev);
    k.forward(dims, cfg, a16.data<bf16>(), b16.data<bf16>(), v16.data<bf16>(), out16.data<bf16>(), stat.device_f32(),
              ws.device_f32(), ws.numel());
  }
  return record(op, ops_internal::widened_to_f32(op, out16), {a, b, v},
                [op, table, a16, b16, v16, out16, stat, mask, dims, cfg](const Tensor& dy,
                                                                         const NeedsGrad& needs) -> Grads {
                  const Device dev = a16.device();
                  const Kernels& kb = *(backend_for(dev).*table);
                  Config c = cfg;
                  c.key_padding_mask = mask.defined() ? mask.device_f32() : nullptr;
                  const Tensor dy16 = ops_internal::rounded_to_bf16(op, dy);
                  auto gradient = [&](bool needed, const Tensor& like) {
                    return needed ? Tensor::empty(like.shape(), dev, DType::bf16) : Tensor();
                  };
                  Tensor da = gradient(needs[0], a16), db = gradient(needs[1], b16), dv = gradient(needs[2], v16);
                  auto ptr = [](Tensor& t) { return t.defined() ? t.data<bf16>() : nullptr; };
                  {
                    Tensor ws = workspace(kb.backward_workspace_floats(dims, c), dev);
                    kb.backward(dims, c, a16.data<bf16>(), b16.data<bf16>(), v16.data<bf16>(), out16.data<bf16>(),
                                stat.device_f32(), dy16.data<bf16>(), ptr(da), ptr(db), ptr(dv), ws.device_f32(),
                                ws.numel());
                  }
                  auto widened = [&](const Tensor& g) { return g.defined() ? ops_internal::widened_to_f32(op, g) : g; };
                  return {widened(da), widened(db), widened(dv)};
                });
}

// The four f32 kernels of one attention algorithm, as a backend holds them (linear: the
// normaliser, softmax: lse is the per-row statistic); their forward and backward take the same
// arguments for both algorithms.
template <typename Dims, typename Config>
struct F32AttentionKernels {
  size_t (*forward_workspace_floats)(const Dims&, const Config&);
  void (*forward)(const Dims&, const Config&, const float*, const float*, const float*, float*, float*, float*,
                  size_t);
  size_t (*backward_workspace_floats)(const Dims&, const Config&);
  void (*backward)(const Dims&, const Config&, const float*, const float*, const float*, const float*, const float*,
                   const float*, float*, float*, float*, float*, size_t);
};

// Attention in f32: out and the per-row statistic forward, the three gradients backward, on
// the kernels `select` picks from the device's backend (the backward's device is dy's).
template <typename Dims, typename Config>
Tensor attention_in_f32(const char* op, F32AttentionKernels<Dims, Config> (*select)(const kernels::Backend&),
                        const Tensor& a, const Tensor& b, const Tensor& v, const Tensor& mask, const Dims& dims,
                        const Config& cfg) {
  const Device dev = a.device();
  const F32AttentionKernels<Dims, Config> k = select(backend_for(dev));
  Tensor out = Tensor::empty(Shape{dims.batch, dims.heads, dims.n_q, dims.e}, dev);
  Tensor stat = Tensor::empty(Shape{dims.batch, dims.heads, dims.n_q}, dev);
  {
    Tensor ws = workspace(k.forward_workspace_floats(dims, cfg), dev);
    k.forward(dims, cfg, a.device_f32(), b.device_f32(), v.device_f32(), out.device_f32(), stat.device_f32(),
              ws.device_f32(), ws.numel());
  }
  return record(op, out, {a, b, v},
                [op, select, a, b, v, out, stat, mask, dims, cfg](const Tensor& dy, const NeedsGrad& needs) -> Grads {
                  const F32AttentionKernels<Dims, Config> kb = select(ops_internal::kernels_for(op, a, dy));
                  const Device dev = a.device();
                  Config c = cfg;
                  c.key_padding_mask = mask.defined() ? mask.device_f32() : nullptr;
                  Tensor da = needs[0] ? Tensor::empty(a.shape(), dev) : Tensor();
                  Tensor db = needs[1] ? Tensor::empty(b.shape(), dev) : Tensor();
                  Tensor dv = needs[2] ? Tensor::empty(v.shape(), dev) : Tensor();
                  auto ptr = [](Tensor& t) { return t.defined() ? t.device_f32() : nullptr; };
                  Tensor ws = workspace(kb.backward_workspace_floats(dims, c), dev);
                  kb.backward(dims, c, a.device_f32(), b.device_f32(), v.device_f32(), out.device_f32(),
                              stat.device_f32(), dy.device_f32(), ptr(da), ptr(db), ptr(dv), ws.device_f32(),
                              ws.numel());
                  return {da, db, dv};
                });
}

F32AttentionKernels<kc::LinearAttentionDims, kc::LinearAttentionConfig> linear_kernels(const kernels::Backend& k) {
  return {k.linear_attention_forward_workspace_floats, k.linear_attention_forward,
          k.linear_attention_backward_workspace_floats, k.linear_attention_backward};
}

F32AttentionKernels<kc::SoftmaxAttentionDims, kc::SoftmaxAttentionConfig> softmax_kernels(const kernels::Backend& k) {
  return {k.softmax_attention_forward_workspace_floats, k.softmax_attention_forward,
          k.softmax_attention_backward_workspace_floats, k.softmax_attention_backward};
}

// The kernel's dims of q/a (B,H,Nq,d), k/b (B,H,Nk,d), v (B,H,Nk,e), and the part of its
// config both attentions take from their options: causal and the checked padding mask.
template <typename Dims>
Dims attention_dims(const Tensor& q, const Tensor& k, const Tensor& v) {
  return Dims{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

template <typename Config, typename Dims, typename Options>
Config masked_config(const char* op, const Options& opt, const Dims& dims, const Tensor& q) {
  Config cfg;
  cfg.causal = opt.causal;
  cfg.key_padding_mask = mask_data(op, opt.key_padding_mask, dims.batch, dims.n_k, q);
  return cfg;
}

// Attention on the bf16 kernels (`bf16_table`, recorded as `bf16_op`) where the options ask for
// bf16 and `runs_in_bf16` says the device has them for these head dimensions, else on the f32
// kernels `f32` selects.
template <typename Options, typename Kernels, typename Dims, typename Config>
Tensor attention_at_precision(const char* op, const Options& opt, bool (*runs_in_bf16)(Device, int64_t, int64_t),
                              const char* bf16_op, const Kernels* kernels::Backend::*bf16_table,
                              F32AttentionKernels<Dims, Config> (*f32)(const kernels::Backend&), const Tensor& a,
                              const Tensor& b, const Tensor& v, const Dims& dims, const Config& cfg) {
  if (opt.precision == Precision::bf16 && runs_in_bf16(a.device(), dims.d, dims.e))
    return attention_in_bf16(bf16_op, bf16_table, a, b, v, opt.key_padding_mask, dims, cfg);
  return attention_in_f32(op, f32, a, b, v, opt.key_padding_mask, dims, cfg);
}

}  // namespace

Tensor linear_attention(const Tensor& a, const Tensor& b, const Tensor& v,
                        const LinearAttentionOptions& opt) {
  const char* op = "linear_attention";
  check_qkv(op, a, b, v, opt.causal);
  if (!kernel_fuses(a.device(), opt.fused_feature_map)) {
    LinearAttentionOptions features = opt;
    features.fused_feature_map = FeatureMap::identity;
    return linear_attention(feature_map(a, opt.fused_feature_map, FeatureRole::query),
                            feature_map(b, opt.fused_feature_map, FeatureRole::key), v, features);
  }
  const auto dims = attention_dims<kc::LinearAttentionDims>(a, b, v);
  auto cfg = masked_config<kc::LinearAttentionConfig>(op, opt, dims, a);
  cfg.eps = opt.eps;
  cfg.chunk = opt.chunk;
  cfg.feature_map = opt.fused_feature_map;
  return attention_at_precision(op, opt, &linear_attention_runs_in_bf16, "linear_attention (bf16)",
                                &kernels::Backend::linear_attention_bf16, &linear_kernels, a, b, v, dims, cfg);
}

LinearAttentionState LinearAttentionState::zeros(int64_t batch, int64_t heads, int64_t d, int64_t e) {
  TARN_ASSERT(batch >= 0 && heads >= 0 && d > 0 && e > 0, "LinearAttentionState: bad extents B=",
              batch, " H=", heads, " d=", d, " e=", e);
  return {Tensor::zeros(Shape{batch, heads, d, e + 1}), 0};
}

Tensor linear_attention_step(LinearAttentionState& state, const Tensor& a, const Tensor& b,
                             const Tensor& v, const LinearAttentionStepOptions& opt) {
  const char* op = "linear_attention_step";
  for (const Tensor* t : {&a, &b, &v}) {
    check_f32(op, *t);
    check_same_device(op, a, *t);
    TARN_ASSERT(t->dim() == 3 || (t->dim() == 4 && t->size(2) == 1), op,
                ": expected (B, H, dim) or (B, H, 1, dim), got shape ", t->shape().str());
  }
  if (!kernel_fuses(a.device(), opt.fused_feature_map)) {
    LinearAttentionStepOptions features = opt;
    features.fused_feature_map = FeatureMap::identity;
    return linear_attention_step(state, feature_map(a, opt.fused_feature_map, FeatureRole::query),
                                 feature_map(b, opt.fused_feature_map, FeatureRole::key), v, features);
  }
  const int64_t B = a.size(0), H = a.size(1), d = a.shape().back(), e = v.shape().back();
  TARN_ASSERT(b.size(0) == B && b.size(1) == H && b.shape().back() == d && v.size(0) == B &&
                 v.size(1) == H,
              op, ": shapes differ: a ", a.shape().str(), ", b ", b.shape().str(), ", v ",
              v.shape().str());
  TARN_ASSERT(state.s.defined() && state.s.shape() == Shape({B, H, d, e + 1}), op,
              ": state must be (B, H, d, e+1) = (", B, ", ", H, ", ", d, ", ", e + 1, "), got ",
              state.s.defined() ? state.s.shape().str() : std::string("undefined"));
  check_same_device(op, a, state.s);
  const kernels::Backend& k = backend_for(a.device());
  kc::LinearAttentionConfig cfg;
  cfg.eps = opt.eps;
  cfg.feature_map = opt.fused_feature_map;
  cfg.key_padding_mask = mask_data(op, opt.key_padding_mask.defined()
                                           ? opt.key_padding_mask.view(Shape{B, 1})
                                           : Tensor(),
                                   B, 1, a);
  Tensor out = Tensor::empty(Shape{B, H, e}, a.device());
  k.linear_attention_step({B, H, 1, 1, d, e}, cfg, a.device_f32(), b.device_f32(), v.device_f32(),
                          state.s.device_f32(), out.device_f32());
  ++state.steps;
  return out;
}

// ---- softmax attention ----

bool softmax_attention_runs_in_bf16(Device device, int64_t d, int64_t e) {
  const kernels::SoftmaxAttentionBf16Kernels* k = backend_for(device).softmax_attention_bf16;
  return k && d <= k->max_dim && e <= k->max_dim;
}

Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                         const SoftmaxAttentionOptions& opt) {
  const char* op = "softmax_attention";
  check_qkv(op, q, k, v, opt.causal);
  if (opt.key_padding_mask.defined()) {
    check_f32(op, opt.key_padding_mask);
    check_same_device(op, q, opt.key_padding_mask);
  }
  TARN_ASSERT(opt.window >= 0, op, ": window must be >= 0, got ", opt.window);
  const kernels::Backend& kt = backend_for(q.device());
  // Head dimensions beyond what the device's blocked kernel tiles: matmul + softmax instead.
  if (q.size(3) > kt.softmax_attention_max_dim || v.size(3) > kt.softmax_attention_max_dim)
    return ops_internal::softmax_attention_composed(q, k, v, opt);
  const auto dims = attention_dims<kc::SoftmaxAttentionDims>(q, k, v);
  auto cfg = masked_config<kc::SoftmaxAttentionConfig>(op, opt, dims, q);
  cfg.scale = opt.scale;
  cfg.window = opt.window;
  return attention_at_precision(op, opt, &softmax_attention_runs_in_bf16, "softmax_attention (bf16)",
                                &kernels::Backend::softmax_attention_bf16, &softmax_kernels, q, k, v, dims, cfg);
}

}  // namespace tarn
