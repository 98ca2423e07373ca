#include "layers/attention.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops/delta_rule.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "framework/ops/reduce.h"
#include "framework/ops/shape_ops.h"
#include "framework/staging.h"
#include "kernels/softmax_attention.h"

namespace tarn {
namespace {

// Added to the scores of masked keys before the softmax (the path with attention dropout):
// exp() of it is exactly 0 in f32, and unlike -inf a fully masked row stays finite.
constexpr float kMaskedScore = -1e9f;

// The epsilon of delta attention's per-head RMSNorm (LayerNorm's, 1e-5).
constexpr float kDeltaNormEps = 1e-5f;

// (B, N) flags -> (B, 1, N) f32, 1 = padded (broadcasts over heads); undefined when none.
Tensor padding_rows(const PaddingMask& pad, int64_t batch, int64_t length, Device device) {
  if (pad.empty()) return Tensor();
  return padding_tensor(pad, batch, length, device).view({batch, 1, length});
}

// FAVOR+ projections draw from streams of the model seed far from the weights' stream 0.
constexpr uint64_t kFavorStreamBase = uint64_t{1} << 40;

void check_padding(const char* what, const PaddingMask& pad, int64_t batch, int64_t length) {
  TARN_ASSERT(pad.empty() || static_cast<int64_t>(pad.size()) == batch * length, what, ": key padding mask has ",
              pad.size(), " flags, expected batch ", batch, " x keys ", length, " = ", batch * length);
}

// Additive softmax mask broadcastable to scores (B, H, Nq, Nk): (B or 1, 1, Nq or 1, Nk);
// undefined when nothing is masked. window > 0: the sliding window's mask as well.
Tensor softmax_mask_bias(int64_t batch, int64_t nq, int64_t nk, const PaddingMask& pad, bool causal, int64_t window) {
  if (pad.empty() && !causal && window == 0) return Tensor();
  const int64_t rows_b = pad.empty() ? 1 : batch, rows_q = causal || window > 0 ? nq : 1;
  Tensor bias = Tensor::zeros({rows_b, 1, rows_q, nk});
  float* p = bias.f32();
  for (int64_t b = 0; b < rows_b; ++b)
    for (int64_t i = 0; i < rows_q; ++i)
      for (int64_t j = 0; j < nk; ++j) {
        const kernels::cpu::KeyRange keys = kernels::cpu::visible_keys(i, nk, causal, window);
        const bool masked = j < keys.begin || j >= keys.end || (!pad.empty() && pad[b * nk + j]);
        p[(b * rows_q + i) * nk + j] = masked ? kMaskedScore : 0.0f;
      }
  return bias;
}

// (B, 1, N, 1) on `device`: 1 for real keys, 0 for padding (zeroes padded rows of φ(K),
// docs/design.md section 2); the batch's staged copy when there is one (framework/staging.h).
Tensor key_keep(int64_t batch, int64_t nk, const PaddingMask& pad, Device device) {
  if (const StagedBatch* staged = StagedBatch::active()) {
    const Tensor t = staged->mask(pad, /*keep=*/true, device);
    if (t.defined()) return t.view({batch, 1, nk, 1});
  }
  Tensor keep = Tensor::empty({batch, 1, nk, 1});
  float* p = keep.f32();
  for (int64_t i = 0; i < batch * nk; ++i) p[i] = pad[i] ? 0.0f : 1.0f;
  return keep.to(device);
}

// [v | 1]: (B, H, N, e) -> (B, H, N, e + 1); the ones column makes the normaliser one more
// output column of the same products (docs/design.md section 2).
Tensor append_ones(const Tensor& v) {
  Shape s = v.shape();
  s[3] = 1;
  return concat({v, Tensor::ones(s, v.device())}, 3);
}

// out = num / (den + eps) from U = [num | den], (B, H, N, e + 1) -> (B, H, N, e).
Tensor normalise(const Tensor& u, float eps) {
  const int64_t e = u.size(3) - 1;
  return div(slice(u, 3, 0, e), add_scalar(slice(u, 3, e, e + 1), eps));
}

// x (B, H, N, f) with rows of zeros appended along N up to `length` positions.
Tensor pad_positions(const Tensor& x, int64_t length) {
  if (x.size(2) == length) return x;
  Shape s = x.shape();
  s[2] = length - x.size(2);
  return concat({x, Tensor::zeros(s, x.device())}, 2);
}

// g^0, g^stride, g^(2 stride), ..., g^(count stride): the powers of a head's decay that aligned
// cross-attention's masks and factors read, one pow each instead of one per entry of the C x C
// and m x m matrices that repeat them.
std::vector<float> decay_powers(double g, int64_t count, int64_t stride = 1) {
  std::vector<float> p(static_cast<size_t>(count + 1));
  for (int64_t t = 0; t <= count; ++t) p[t] = static_cast<float>(std::pow(g, static_cast<double>(t * stride)));
  return p;
}

// FAVOR+ without a stabiliser: exp(W x' - |x'|^2 / 2) / sqrt(m), x' = d^(-1/4) x (docs/design.md
// section 2). Each row depends on that row only, so a causal forward and a decoding step give
// the same features. W x' has entries ~ N(0, |x'|^2), so the exponent stays below ~|x'|^2/2
// unless |x'| is large: no overflow in practice.
Tensor favor_unstabilised(const Tensor& x, const Tensor& w) {
  const int64_t d = x.shape().back(), m = w.size(0);
  const Tensor xs = scale(x, 1.0f / std::pow(static_cast<float>(d), 0.25f));
  const Tensor t = matmul(xs, w, false, true);                  // (..., N, m)
  const Tensor half_sq = scale(sum(mul(xs, xs), -1, true), 0.5f);  // (..., N, 1)
  return scale(exp(sub(t, half_sq)), 1.0f / std::sqrt(static_cast<float>(m)));
}

}  // namespace

Tensor padding_tensor(const PaddingMask& pad, int64_t batch, int64_t length, Device device) {
  if (pad.empty()) return Tensor();
  TARN_ASSERT(static_cast<int64_t>(pad.size()) == batch * length, "padding mask: ", pad.size(), " flags for (",
              batch, ", ", length, ")");
  if (const StagedBatch* staged = StagedBatch::active()) {  // shared by every attention of the batch
    const Tensor t = staged->mask(pad, /*keep=*/false, device);
    if (t.defined()) return t.view({batch, length});
  }
  Tensor t = Tensor::empty({batch, length});
  float* p = t.f32();
  for (size_t i = 0; i < pad.size(); ++i) p[i] = pad[i] ? 1.0f : 0.0f;
  return t.to(device);  // built on the host, copied once
}

void reorder(AttentionCache& cache, const std::vector<int64_t>& indices) {
  auto gather = [&](Tensor& t) {
    if (!t.defined()) return;
    Shape s = t.shape();
    const int64_t rows = s[0];
    s[0] = static_cast<int64_t>(indices.size());
    Tensor out = Tensor::empty(s, t.device());
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t src = indices[i];
      TARN_ASSERT(src >= 0 && src < rows, "reorder: index ", src, " out of range for batch ", rows);
      out.narrow0(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1).copy_from(t.narrow0(src, src + 1));
    }
    t = out;
  };
  gather(cache.key);
  gather(cache.value);
  gather(cache.key_padding);
  gather(cache.state);
  gather(cache.q_tail);
  gather(cache.k_tail);
  gather(cache.v_tail);
}

AttentionCache clone(const AttentionCache& cache) {
  AttentionCache c = cache;
  for (Tensor* t : {&c.key, &c.value, &c.key_padding, &c.state, &c.q_tail, &c.k_tail, &c.v_tail})
    if (t->defined()) *t = t->clone();
  return c;
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t heads, const AttentionConfig& config, bool causal,
                                       float attention_dropout, ParamInit& init, DropoutStreams& dropout, bool cross)
    : k_proj(d_model, d_model, init),
      v_proj(d_model, d_model, init),
      q_proj(d_model, d_model, init),
      out_proj(d_model, d_model, init),
      config_(config),
      heads_(heads),
      head_dim_(heads > 0 ? d_model / heads : 0),
      causal_(causal),
      cross_(cross),
      attention_dropout_(attention_dropout),
      scaling_(heads > 0 ? 1.0f / std::sqrt(static_cast<float>(d_model / heads)) : 0.0f),
      dropout_(&dropout) {
  TARN_ASSERT(heads > 0 && d_model % heads == 0, "attention: d_model ", d_model, " is not divisible by ", heads,
              " heads");
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("q_proj", q_proj);
  register_module("out_proj", out_proj);
  TARN_ASSERT(!(causal && cross), "attention: cross-attention cannot be causal");
  if (config_.has_delta_block()) {
    delta_ = std::make_unique<DeltaRuleBlock>(d_model, heads, config_.conv_size, cross, kDeltaNormEps, init);
    register_module("delta", *delta_);
  }
  TARN_ASSERT(cross || !config_.is_aligned(), "attention: align_decay is for cross-attention only");
  if (config_.is_hybrid()) {
    TARN_ASSERT(!(cross && config_.has_delta_block()), "attention: hybrid cross-attention takes global linear only");
    hybrid_gate_ = std::make_unique<Linear>(d_model, heads, init);
    register_module("hybrid_gate", *hybrid_gate_);
  }
  if (config_.is_gated_aligned()) {
    align_gate_ = std::make_unique<Linear>(d_model, heads, init);
    register_module("align_gate", *align_gate_);
  }
  if (config_.uses_feature_map()) {
    map_ = config_.feature_map;
    if (map_ == FeatureMap::taylor) {
      taylor_proj_ = std::make_unique<Linear>(head_dim_, config_.taylor_dim, init, /*with_bias=*/false);
      register_module("taylor_proj", *taylor_proj_);
    }
    if (map_ == FeatureMap::hedgehog) {
      // The identity per head: at the start φ(x) = [softmax(x), softmax(-x)].
      for (Tensor* w : {&hedgehog_q_, &hedgehog_k_}) {
        *w = Tensor::zeros({heads_, head_dim_, head_dim_});
        for (int64_t h = 0; h < heads_; ++h)
          for (int64_t i = 0; i < head_dim_; ++i) w->f32()[(h * head_dim_ + i) * head_dim_ + i] = 1.0f;
      }
      register_parameter("hedgehog_q", hedgehog_q_, Init::kept_initial_value);
      register_parameter("hedgehog_k", hedgehog_k_, Init::kept_initial_value);
    }
    if (map_ == FeatureMap::favor) {
      favor_.m = config_.feature_count(head_dim_);
      favor_.d = head_dim_;
      favor_.redraw_every = config_.favor_redraw_every;
      favor_.rng = RngState{init.seed(), kFavorStreamBase + init.next_stream(), 0};
      favor_.draw();
      register_buffer("favor_projection", favor_.w);
    }
  }
}

int64_t MultiHeadAttention::feature_dim() const {
  return config_.feature_count(head_dim_);
}

Tensor MultiHeadAttention::taylor_features(const Tensor& x) const {
  return taylor_feature_map(taylor_proj_->forward(x), static_cast<int>(config_.taylor_order));
}

Tensor MultiHeadAttention::hedgehog_features(const Tensor& x, const Tensor& w) const {
  // (B, H, N, dh) -> (H, B N, dh): the heads become matmul's batch, which w's (H, dh, dh) matches.
  const int64_t b = x.size(0), n = x.size(2);
  const Tensor rows = reshape(permute(x, {1, 0, 2, 3}), {heads_, b * n, head_dim_});
  const Tensor p = permute(reshape(matmul(rows, w, false, true), {heads_, b, n, head_dim_}), {1, 0, 2, 3});
  return concat({softmax(p), softmax(neg(p))}, -1);
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
  const int64_t b = x.size(0), n = x.size(1);
  return permute(reshape(x, {b, n, heads_, head_dim_}), {0, 2, 1, 3});
}

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const {
  const int64_t b = x.size(0), n = x.size(2);
  return reshape(permute(x, {0, 2, 1, 3}), {b, n, heads_ * head_dim_});
}

FeatureMap MultiHeadAttention::fused_map() const { return materialises_features() ? FeatureMap::identity : map_; }

Tensor MultiHeadAttention::query_features(const Tensor& q) const {
  if (map_ == FeatureMap::taylor) return taylor_features(q);
  if (map_ == FeatureMap::hedgehog) return hedgehog_features(q, hedgehog_q_);
  if (map_ == FeatureMap::favor) return feature_map(q, map_, FeatureRole::query, favor_.w.to(q.device()));
  return feature_map(q, map_, FeatureRole::query);
}

Tensor MultiHeadAttention::key_features(const Tensor& k) const {
  if (map_ == FeatureMap::taylor) return taylor_features(k);
  if (map_ == FeatureMap::hedgehog) return hedgehog_features(k, hedgehog_k_);
  if (map_ == FeatureMap::favor)
    return causal_ ? favor_unstabilised(k, favor_.w.to(k.device()))
                   : feature_map(k, map_, FeatureRole::key, favor_.w.to(k.device()));
  return feature_map(k, map_, FeatureRole::key);
}

// HF's path, kept for attention dropout: it needs the probabilities themselves.
Tensor MultiHeadAttention::softmax_with_dropout(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const PaddingMask& pad, int64_t window) const {
  Tensor scores = matmul(scale(q, scaling_), k, false, true, precision());  // (B, H, Nq, Nk)
  const Tensor bias = softmax_mask_bias(q.size(0), q.size(2), k.size(2), pad, causal_, window);
  if (bias.defined()) scores = add(scores, bias.to(scores.device()));
  return matmul(dropout_->apply(softmax(scores), attention_dropout_, true), v, false, false, precision());
}

Tensor MultiHeadAttention::forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  if (!transfer_ || config_.is_softmax()) return own_forward(query, key_value, pad);
  Tensor teacher;
  {
    NoGradGuard no_grad;
    teacher = softmax_teacher(query, key_value, pad);
  }
  const Tensor diff = sub(own_forward(query, key_value, pad), teacher);
  transfer_->terms.push_back({transfer_name_, mean_all(mul(diff, diff))});
  return teacher;
}

Tensor MultiHeadAttention::softmax_teacher(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  const Tensor q = split_heads(q_proj.forward(query)), k = split_heads(k_proj.forward(key_value)),
               v = split_heads(v_proj.forward(key_value));
  SoftmaxAttentionOptions opt;
  opt.causal = causal_;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  opt.precision = precision();
  return out_proj.forward(merge_heads(softmax_attention(q, k, v, opt)));
}

Tensor MultiHeadAttention::own_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  TARN_ASSERT(query.dim() == 3 && key_value.dim() == 3 && query.size(0) == key_value.size(0) &&
                 query.size(2) == heads_ * head_dim_ && key_value.size(2) == heads_ * head_dim_,
              "attention: query ", query.shape().str(), " and key/value ", key_value.shape().str(),
              " must be (B, N, ", heads_ * head_dim_, ") with the same B");
  const int64_t batch = query.size(0), nq = query.size(1), nk = key_value.size(1);
  check_padding("attention", pad, batch, nk);
  TARN_ASSERT(!causal_ || nq == nk, "causal attention: ", nq, " queries but ", nk, " keys");
  if (config_.is_gated_recurrence()) return delta_forward(query, key_value, pad);

  const Tensor qp = q_proj.forward(query), kp = k_proj.forward(key_value), vp = v_proj.forward(key_value);
  const Tensor q = split_heads(qp), k = split_heads(kp), v = split_heads(vp);
  Tensor ctx;
  if (config_.is_softmax()) {
    ctx = softmax_context(q, k, v, pad, 0);
  } else if (config_.is_linear()) {
    ctx = linear_context(q, k, v, pad, query);
  } else {  // hybrid
    const Tensor global =
        config_.has_delta_block() ? split_heads(delta_self_output(qp, kp, vp, query, pad)) : linear_context(q, k, v, pad);
    ctx = hybrid_mix(softmax_context(q, k, v, pad, config_.window), global, query);
  }
  return out_proj.forward(merge_heads(ctx));
}

Tensor MultiHeadAttention::softmax_context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad,
                                           int64_t window) const {
  if (training() && attention_dropout_ > 0.0f) return softmax_with_dropout(q, k, v, pad, window);
  SoftmaxAttentionOptions opt;
  opt.causal = causal_;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.scale = scaling_;
  opt.window = window;
  opt.precision = precision();  // bf16 kernels where the device has them (framework/ops/attention.h)
  return softmax_attention(q, k, v, opt);
}

Tensor MultiHeadAttention::linear_context(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const PaddingMask& pad, const Tensor& x) const {
  const bool gated = config_.is_gated_aligned();
  if (config_.is_aligned() && !gated) return aligned_context(q, k, v, pad);
  LinearAttentionOptions opt;
  opt.causal = causal_;
  opt.key_padding_mask = padding_tensor(pad, q.size(0), k.size(2), q.device());
  opt.eps = static_cast<float>(config_.eps);
  opt.chunk = static_cast<int>(config_.chunk);
  opt.fused_feature_map = fused_map();
  opt.precision = precision();  // bf16 kernels where the device has them (framework/ops/attention.h)
  if (gated) {  // align_gate: the decayed read and the plain one, mixed per head and position
    TARN_ASSERT(x.defined(), "attention: gated aligned cross-attention needs the layer's input for its gate");
    const Tensor plain = materialises_features() ? linear_attention(query_features(q), key_features(k), v, opt)
                                                 : linear_attention(q, k, v, opt);
    return align_mix(aligned_context(q, k, v, pad), plain, x);
  }
  if (materialises_features()) return linear_attention(query_features(q), key_features(k), v, opt);
  return linear_attention(q, k, v, opt);  // φ applied inside the kernel
}

Tensor MultiHeadAttention::aligned_context(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const PaddingMask& pad) const {
  // U_i = Σ_j γ_h^|i-j| (a_i·b_j) v'_j over target and source side by side (n = max(Nq, Nk)
  // positions, zero rows beyond either's end; docs/design.md "Aligned cross-attention"), by
  // chunks of C positions. Within a chunk, the C x C products masked by the decays; between
  // chunks, the decay factors at the chunk boundaries: for a key j of an earlier chunk c',
  // γ^(i-j) = γ^(i - c0) γ^(C (c - c' - 1)) γ^(c'0 + C - j), so each chunk's keys are summed once
  // into a state weighted towards its right end (R) and one towards its left end (L), the states
  // are mixed across chunks by an m x m matrix of γ^(C distance), and each query reads them
  // weighted from its own chunk's ends. GEMMs throughout, O(n C (f + e) + n f e + m^2 f e).
  const int64_t batch = q.size(0), nq = q.size(2), nk = k.size(2), f = feature_dim(), e = v.size(3) + 1;
  const int64_t c = std::min<int64_t>(config_.chunk, std::max(nq, nk)), m = (std::max(nq, nk) + c - 1) / c;
  Tensor b = key_features(k);
  if (!pad.empty()) b = mul(b, key_keep(batch, nk, pad, b.device()));
  const Shape chunked{batch, heads_, m, c, -1};
  const Tensor a = reshape(pad_positions(query_features(q), m * c), chunked);
  const Tensor vv = reshape(pad_positions(append_ones(v), m * c), chunked);
  b = reshape(pad_positions(b, m * c), chunked);
  const Device dev = q.device();
  // Per head: the decays within a chunk (H, C, C) and each row's factor towards the chunk's
  // left end (γ^t) and right end (γ^(C - t)), (H, C).
  Tensor within = Tensor::empty({1, heads_, 1, c, c}), left = Tensor::empty({1, heads_, 1, c, 1}),
         right = Tensor::empty({1, heads_, 1, c, 1});
  for (int64_t h = 0; h < heads_; ++h) {
    const std::vector<float> pw = decay_powers(config_.head_decay(h), c);
    for (int64_t i = 0; i < c; ++i) {
      left.f32()[h * c + i] = pw[i];
      right.f32()[h * c + i] = pw[c - i];
      for (int64_t j = 0; j < c; ++j) within.f32()[(h * c + i) * c + j] = pw[std::abs(i - j)];
    }
  }
  Tensor u = matmul(mul(matmul(a, b, false, true), within.to(dev)), vv);  // (B, H, m, C, e)
  if (m > 1) {
    const Tensor to_left = left.to(dev), to_right = right.to(dev);
    // States (B, H, m, f e): keys weighted towards their chunk's right end (read by later
    // chunks) and towards its left end (read by earlier ones).
    const Tensor r = reshape(matmul(mul(b, to_right), vv, true, false), {batch, heads_, m, f * e});
    const Tensor l = reshape(matmul(mul(b, to_left), vv, true, false), {batch, heads_, m, f * e});
    // Across chunks: from earlier chunk c' to chunk c, γ^(C (c - c' - 1)); from later, the mirror.
    // (Repeated for every batch row: matmul pairs leading dimensions one to one.)
    Tensor earlier = Tensor::zeros({batch, heads_, m, m}), later = Tensor::zeros({batch, heads_, m, m});
    float* const to_earlier = earlier.f32();
    float* const to_later = later.f32();
    for (int64_t h = 0; h < heads_; ++h) {
      const std::vector<float> across = decay_powers(config_.head_decay(h), m, c);  // γ^(C t)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) {
          if (i == j) continue;
          float* const mix = j < i ? to_earlier : to_later;
          for (int64_t bi = 0; bi < batch; ++bi) mix[((bi * heads_ + h) * m + i) * m + j] = across[std::abs(i - j) - 1];
        }
    }
    const Tensor from_earlier = reshape(matmul(earlier.to(dev), r), {batch, heads_, m, f, e});
    const Tensor from_later = reshape(matmul(later.to(dev), l), {batch, heads_, m, f, e});
    u = add(u, add(matmul(mul(a, to_left), from_earlier), matmul(mul(a, to_right), from_later)));
  }
  return normalise(slice(reshape(u, {batch, heads_, m * c, e}), 2, 0, nq), static_cast<float>(config_.eps));
}

namespace {
// g a + (1 - g) b with g = σ(x W_g^T + b_g): (B, N, H) -> (B, H, N, 1), one weight per head and
// position; a, b (B, H, N, e).
Tensor gated_mix(const Linear& gate_proj, int64_t heads, const Tensor& a, const Tensor& b, const Tensor& x) {
  const Tensor g = sigmoid(gate_proj.forward(x));
  const Tensor gate = reshape(permute(g, {0, 2, 1}), {x.size(0), heads, x.size(1), 1});
  return add(b, mul(gate, sub(a, b)));
}
}  // namespace

Tensor MultiHeadAttention::hybrid_mix(const Tensor& local, const Tensor& global, const Tensor& x) const {
  return gated_mix(*hybrid_gate_, heads_, local, global, x);  // g local + (1 - g) global
}

Tensor MultiHeadAttention::align_mix(const Tensor& aligned, const Tensor& plain, const Tensor& x) const {
  return gated_mix(*align_gate_, heads_, aligned, plain, x);  // g aligned + (1 - g) plain
}

AttentionCache MultiHeadAttention::start_self(int64_t batch) const {
  AttentionCache c;
  if (config_.has_delta_block()) {  // delta and gated, and hybrid's global part over them
    const Device dev = q_proj.weight.device();
    const int64_t d = heads_ * head_dim_, taps = delta_->conv_size();
    c.state = Tensor::zeros({batch, heads_, head_dim_, head_dim_}, dev);
    for (Tensor* tail : {&c.q_tail, &c.k_tail, &c.v_tail}) *tail = Tensor::zeros({batch, taps - 1, d}, dev);
    if (config_.is_gated_recurrence()) return c;
  }
  if (config_.uses_feature_map())
    c.state = LinearAttentionState::zeros(batch, heads_, feature_dim(), head_dim_).s.to(q_proj.weight.device());
  if (!config_.is_linear()) {  // softmax, and hybrid's window
    c.key = Tensor::zeros({batch, heads_, 0, head_dim_}, q_proj.weight.device());
    c.value = Tensor::zeros({batch, heads_, 0, head_dim_}, q_proj.weight.device());
  }
  return c;
}

Tensor MultiHeadAttention::step_self(const Tensor& query, AttentionCache& cache) const {
  NoGradGuard no_grad;
  TARN_ASSERT(query.dim() == 3 && query.size(1) == 1 && query.size(2) == heads_ * head_dim_,
              "attention step: query must be (B, 1, ", heads_ * head_dim_, "), got ", query.shape().str());
  TARN_ASSERT(cache.defined(), "attention step: the cache was not started (start_self)");
  TARN_ASSERT(causal_, "attention step: only causal self-attention decodes step by step");
  if (config_.is_gated_recurrence()) {
    const Tensor o = delta_step_output(q_proj.forward(query), k_proj.forward(query), v_proj.forward(query), query, cache);
    ++cache.length;
    return out_proj.forward(o);
  }
  const Tensor qp = q_proj.forward(query), kp = k_proj.forward(query), vp = v_proj.forward(query);
  const Tensor q = split_heads(qp), k = split_heads(kp), v = split_heads(vp);  // (B, H, 1, dh)
  const int64_t batch = query.size(0);
  Tensor local, global;
  if (config_.has_delta_block()) global = split_heads(delta_step_output(qp, kp, vp, query, cache));  // hybrid over delta
  if (!config_.is_linear()) {
    cache.key = concat({cache.key, k}, 2);
    cache.value = concat({cache.value, v}, 2);
    // Hybrid keeps the last `window` keys and values: its state is O(window), not O(position).
    if (config_.is_hybrid() && cache.key.size(2) > config_.window) {
      const int64_t n = cache.key.size(2);
      cache.key = slice(cache.key, 2, n - config_.window, n);
      cache.value = slice(cache.value, 2, n - config_.window, n);
    }
    // The newest query sees every cached key: the causal mask and the window hide none.
    local = softmax_step(q, cache.key, cache.value, Tensor());
  }
  if (config_.uses_feature_map()) {
    // S' += φ(k)ᵀ [v | 1]; out = φ(q) S' normalised (docs/design.md section 2, recurrent mode).
    LinearAttentionState st{cache.state, cache.length};
    LinearAttentionStepOptions opt;
    opt.eps = static_cast<float>(config_.eps);
    opt.fused_feature_map = fused_map();
    const bool features = materialises_features();
    global = linear_attention_step(st, features ? query_features(q) : q, features ? key_features(k) : k, v, opt)
                 .view({batch, heads_, 1, head_dim_});
  }
  ++cache.length;
  const Tensor ctx = config_.is_hybrid() ? hybrid_mix(local, global, query) : local.defined() ? local : global;
  return out_proj.forward(merge_heads(ctx));
}

AttentionCache MultiHeadAttention::precompute_cross(const Tensor& key_value, const PaddingMask& pad) const {
  NoGradGuard no_grad;
  TARN_ASSERT(key_value.dim() == 3 && key_value.size(2) == heads_ * head_dim_,
              "cross-attention: encoder output must be (B, S, ", heads_ * head_dim_, "), got ",
              key_value.shape().str());
  TARN_ASSERT(!causal_, "cross-attention: a causal attention module cannot precompute its keys");
  const int64_t batch = key_value.size(0), nk = key_value.size(1);
  check_padding("cross-attention", pad, batch, nk);
  AttentionCache c;
  c.length = nk;
  if (config_.is_gated_recurrence()) {
    const DeltaWrite w = delta_write(key_value, pad);
    c.state = delta_rule_state(w.k, w.v, w.beta, w.alpha, delta_options(false));
    return c;
  }
  const Tensor k = split_heads(k_proj.forward(key_value));
  const Tensor v = split_heads(v_proj.forward(key_value));
  if (!config_.is_linear()) {  // softmax, and hybrid's window
    c.key = k;
    c.value = v;
    c.key_padding = padding_tensor(pad, batch, nk, k.device());
  }
  if (config_.uses_feature_map()) {
    // S' = φ(K)ᵀ [V | 1] with padded keys' rows of φ(K) zero: once per source batch.
    Tensor b = key_features(k);
    if (!pad.empty()) b = mul(b, key_keep(batch, nk, pad, b.device()));
    if (config_.is_aligned()) {  // each position weighs the source by its own decays: keep it all
      c.key = b;
      c.value = append_ones(v);
      if (config_.is_gated_aligned()) c.state = matmul(b, c.value, true, false);  // and the plain read's S'
      return c;
    }
    c.state = matmul(b, append_ones(v), true, false);
  }
  return c;
}

Tensor MultiHeadAttention::step_cross(const Tensor& query, const AttentionCache& cache, int64_t position) const {
  NoGradGuard no_grad;
  TARN_ASSERT(query.dim() == 3 && query.size(2) == heads_ * head_dim_,
              "cross-attention step: query must be (B, N, ", heads_ * head_dim_, "), got ", query.shape().str());
  TARN_ASSERT(cache.defined(), "cross-attention step: no precomputed encoder keys (precompute_cross)");
  TARN_ASSERT(!(config_.is_hybrid() || config_.is_aligned()) || (query.size(1) == 1 && position >= 0),
              "hybrid and aligned cross-attention step: one query row at a known position, got ", query.shape().str(),
              " at position ", position);
  if (config_.is_gated_recurrence()) {  // o = S^T q for every query row at once
    const Tensor q = DeltaRuleBlock::unit_rows(split_heads(q_proj.forward(query)));
    return out_proj.forward(delta_->finish(matmul(q, cache.state), query));
  }
  const Tensor q = split_heads(q_proj.forward(query));
  Tensor local, global;
  if (!config_.is_linear())
    local = config_.is_hybrid() ? window_step_cross(q, cache, position)
                                : softmax_step(q, cache.key, cache.value, cache.key_padding);
  if (config_.is_gated_aligned())
    global = align_mix(aligned_step_cross(q, cache, position),
                       normalise(matmul(query_features(q), cache.state), static_cast<float>(config_.eps)), query);
  else if (config_.is_aligned())
    global = aligned_step_cross(q, cache, position);
  else if (config_.uses_feature_map())
    global = normalise(matmul(query_features(q), cache.state), static_cast<float>(config_.eps));
  const Tensor ctx = config_.is_hybrid() ? hybrid_mix(local, global, query) : local.defined() ? local : global;
  return out_proj.forward(merge_heads(ctx));
}

Tensor MultiHeadAttention::softmax_step(const Tensor& q, const Tensor& key, const Tensor& value,
                                        const Tensor& key_padding) const {
  SoftmaxAttentionOptions opt;
  opt.key_padding_mask = key_padding;
  opt.scale = scaling_;
  return softmax_attention(q, key, value, opt);
}

Tensor MultiHeadAttention::window_step_cross(const Tensor& q, const AttentionCache& cache, int64_t position) const {
  // The source keys the bidirectional window shows this target position in training (the
  // kernels' own rule): O(window) per token whatever the source length.
  const kernels::cpu::KeyRange keys = kernels::cpu::visible_keys(position, cache.key.size(2), false, config_.window);
  if (keys.begin >= keys.end) return Tensor::zeros({q.size(0), heads_, 1, head_dim_}, q.device());  // as in training
  const Tensor padding = cache.key_padding.defined() ? slice(cache.key_padding, 1, keys.begin, keys.end) : Tensor();
  return softmax_step(q, slice(cache.key, 2, keys.begin, keys.end), slice(cache.value, 2, keys.begin, keys.end),
                      padding);
}

Tensor MultiHeadAttention::aligned_step_cross(const Tensor& q, const AttentionCache& cache, int64_t position) const {
  // Row i of aligned_context's sum, term by term: weights c_j = γ_h^|i - j| φ(q)·φ(k_j) over the
  // cached source features (padded rows zero), O(source length) a token.
  const int64_t nk = cache.key.size(2);
  Tensor decay = Tensor::empty({1, heads_, 1, nk});
  float* p = decay.f32();
  // One pow an entry: the distances |i - j| are nearly all distinct here, so a table of powers
  // (aligned_context's) would only add the ones no key is at, all of 0..i past the source's end.
  for (int64_t h = 0; h < heads_; ++h) {
    const double g = config_.head_decay(h);
    for (int64_t j = 0; j < nk; ++j)
      p[h * nk + j] = static_cast<float>(std::pow(g, static_cast<double>(std::abs(position - j))));
  }
  const Tensor w = mul(matmul(query_features(q), cache.key, false, true), decay.to(q.device()));  // (B, H, 1, Nk)
  return normalise(matmul(w, cache.value), static_cast<float>(config_.eps));
}

MultiHeadAttention::DeltaWrite MultiHeadAttention::delta_write(const Tensor& key_value, const PaddingMask& pad) const {
  const Tensor pad_rows = padding_rows(pad, key_value.size(0), key_value.size(1), key_value.device());
  return {DeltaRuleBlock::unit_rows(split_heads(delta_->conv(k_proj.forward(key_value), delta_->k_conv))),
          split_heads(delta_->conv(v_proj.forward(key_value), delta_->v_conv)), delta_->beta(key_value, pad_rows),
          delta_->alpha(key_value, pad_rows)};
}

DeltaRuleOptions MultiHeadAttention::delta_options(bool reverse) const {
  DeltaRuleOptions o{reverse, config_.chunk, config_.erases()};
  o.precision = precision();
  return o;
}

Tensor MultiHeadAttention::delta_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& pad) const {
  if (!cross_)
    return out_proj.forward(
        delta_self_output(q_proj.forward(query), k_proj.forward(key_value), v_proj.forward(key_value), query, pad));
  const DeltaWrite w = delta_write(key_value, pad);
  const Tensor q = DeltaRuleBlock::unit_rows(split_heads(q_proj.forward(query)));
  const Tensor o = matmul(q, delta_rule_state(w.k, w.v, w.beta, w.alpha, delta_options(false)));
  return out_proj.forward(delta_->finish(o, query));
}

Tensor MultiHeadAttention::delta_self_output(const Tensor& qp, const Tensor& kp, const Tensor& vp, const Tensor& x,
                                             const PaddingMask& pad) const {
  const Tensor pad_rows = padding_rows(pad, x.size(0), x.size(1), x.device());
  const Tensor q = DeltaRuleBlock::unit_rows(split_heads(delta_->conv(qp, delta_->q_conv)));
  const Tensor k = DeltaRuleBlock::unit_rows(split_heads(delta_->conv(kp, delta_->k_conv)));
  const Tensor v = split_heads(delta_->conv(vp, delta_->v_conv));
  const Tensor beta = delta_->beta(x, pad_rows), alpha = delta_->alpha(x, pad_rows);
  Tensor o = delta_rule(q, k, v, beta, alpha, delta_options(false));
  if (!causal_) o = add(o, delta_rule(q, k, v, beta, alpha, delta_options(true)));
  return delta_->finish(o, x);
}

Tensor MultiHeadAttention::delta_step_output(const Tensor& qp, const Tensor& kp, const Tensor& vp, const Tensor& x,
                                             AttentionCache& cache) const {
  const int64_t batch = x.size(0), taps = delta_->conv_size();
  // The convolution of the newest position: its window is the tail and the token itself.
  auto convolved = [&](const Tensor& projected, const Tensor& w, Tensor& tail) {
    const Tensor window = concat({tail, projected}, 1);  // (B, taps, D)
    tail = slice(window, 1, 1, taps);
    return slice(delta_->conv(window, w), 1, taps - 1, taps).view({batch, heads_, head_dim_});
  };
  const Tensor q = DeltaRuleBlock::unit_rows(convolved(qp, delta_->q_conv, cache.q_tail));
  const Tensor k = DeltaRuleBlock::unit_rows(convolved(kp, delta_->k_conv, cache.k_tail));
  const Tensor v = convolved(vp, delta_->v_conv, cache.v_tail);
  const Tensor beta = delta_->beta(x, Tensor()).view({batch, heads_});
  const Tensor alpha = delta_->alpha(x, Tensor()).view({batch, heads_});
  const Tensor o =
      delta_rule_step(cache.state, q, k, v, beta, alpha, config_.erases()).view({batch, heads_, 1, head_dim_});
  return delta_->finish(o, x);
}

}  // namespace tarn
