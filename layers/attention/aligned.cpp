#include "layers/attention/aligned.h"

#include <cmath>

#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/shape_ops.h"

namespace tarn {
namespace {

// x (B, H, N, f) with rows of zeros appended along N up to `length` positions.
Tensor pad_positions(const Tensor& x, int64_t length) {
  if (x.size(2) == length) return x;
  Shape s = x.shape();
  s[2] = length - x.size(2);
  return concat({x, Tensor::zeros(s, x.device())}, 2);
}

// g^0, g^stride, g^(2 stride), ..., g^(count stride): the powers of a head's decay that the
// masks and factors read, one pow each instead of one per entry of the C x C and m x m matrices
// that repeat them.
std::vector<float> decay_powers(double g, int64_t count, int64_t stride = 1) {
  std::vector<float> p(static_cast<size_t>(count + 1));
  for (int64_t t = 0; t <= count; ++t) p[t] = static_cast<float>(std::pow(g, static_cast<double>(t * stride)));
  return p;
}

}  // namespace

AlignedCrossAttention::AlignedCrossAttention(AttentionSite& site) : site_(site) {
  TARN_ASSERT(site.shape().cross, "attention: align_decay is for cross-attention only");
  if (site.config().align_gate)
    gate_ = std::make_unique<HeadGate>(site, "align_gate", static_cast<float>(site.config().align_gate_bias));
  plain_ = std::make_unique<LinearAttention>(site);
}

Tensor AlignedCrossAttention::forward(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  const Tensor q = split_heads(in.q, s), k = split_heads(in.k, s), v = split_heads(in.v, s);
  if (!gate_) return merge_heads(context(q, k, v, in.padding()));
  // align_gate: the decayed read and the plain one, mixed per head and position.
  const Tensor plain = plain_->context(q, k, v, in.padding());
  return merge_heads(gate_->mix(context(q, k, v, in.padding()), plain, in.x));
}

Tensor AlignedCrossAttention::context(const Tensor& q, const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  // U_i = Σ_j γ_h^|i-j| (a_i·b_j) v'_j over target and source side by side (n = max(Nq, Nk)
  // positions, zero rows beyond either's end; docs/design.md "Aligned cross-attention"), by
  // chunks of C positions. Within a chunk, the C x C products masked by the decays; between
  // chunks, the decay factors at the chunk boundaries: for a key j of an earlier chunk c',
  // γ^(i-j) = γ^(i - c0) γ^(C (c - c' - 1)) γ^(c'0 + C - j), so each chunk's keys are summed once
  // into a state weighted towards its right end (R) and one towards its left end (L), the states
  // are mixed across chunks by an m x m matrix of γ^(C distance), and each query reads them
  // weighted from its own chunk's ends. GEMMs throughout, O(n C (f + e) + n f e + m^2 f e).
  const AttentionConfig& config = site_.config();
  const FeatureMapLayer& phi = plain_->features();
  const int64_t heads = site_.shape().heads;
  const int64_t batch = q.size(0), nq = q.size(2), nk = k.size(2), e = v.size(3) + 1;
  const int64_t f = phi.feature_dim();
  const int64_t c = std::min<int64_t>(config.chunk, std::max(nq, nk)), m = (std::max(nq, nk) + c - 1) / c;
  Tensor b = plain_->masked_key_features(k, pad);
  const Shape chunked{batch, heads, m, c, -1};
  const Tensor a = reshape(pad_positions(phi.query_features(q), m * c), chunked);
  const Tensor vv = reshape(pad_positions(append_ones(v), m * c), chunked);
  b = reshape(pad_positions(b, m * c), chunked);
  const Device dev = q.device();
  // Per head: the decays within a chunk (H, C, C) and each row's factor towards the chunk's
  // left end (γ^t) and right end (γ^(C - t)), (H, C).
  Tensor within = Tensor::empty({1, heads, 1, c, c}), left = Tensor::empty({1, heads, 1, c, 1}),
         right = Tensor::empty({1, heads, 1, c, 1});
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<float> pw = decay_powers(config.head_decay(h), c);
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
    const Tensor r = reshape(matmul(mul(b, to_right), vv, true, false), {batch, heads, m, f * e});
    const Tensor l = reshape(matmul(mul(b, to_left), vv, true, false), {batch, heads, m, f * e});
    // Across chunks: from earlier chunk c' to chunk c, γ^(C (c - c' - 1)); from later, the mirror.
    // (Repeated for every batch row: matmul pairs leading dimensions one to one.)
    Tensor earlier = Tensor::zeros({batch, heads, m, m}), later = Tensor::zeros({batch, heads, m, m});
    float* const to_earlier = earlier.f32();
    float* const to_later = later.f32();
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<float> across = decay_powers(config.head_decay(h), m, c);  // γ^(C t)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) {
          if (i == j) continue;
          float* const mix = j < i ? to_earlier : to_later;
          for (int64_t bi = 0; bi < batch; ++bi) mix[((bi * heads + h) * m + i) * m + j] = across[std::abs(i - j) - 1];
        }
    }
    const Tensor from_earlier = reshape(matmul(earlier.to(dev), r), {batch, heads, m, f, e});
    const Tensor from_later = reshape(matmul(later.to(dev), l), {batch, heads, m, f, e});
    u = add(u, add(matmul(mul(a, to_left), from_earlier), matmul(mul(a, to_right), from_later)));
  }
  return normalise(slice(reshape(u, {batch, heads, m * c, e}), 2, 0, nq), static_cast<float>(config.eps));
}

std::unique_ptr<DecodeState> AlignedCrossAttention::start_self(int64_t) const {
  TARN_ASSERT(false, "attention: aligned cross-attention has no self-attention state");
  return nullptr;
}

Tensor AlignedCrossAttention::step_self(const AttentionInputs&, DecodeState&) const {
  TARN_ASSERT(false, "attention: aligned cross-attention has no self-attention step");
  return Tensor();
}

std::unique_ptr<DecodeState> AlignedCrossAttention::precompute_cross(const AttentionInputs& in) const {
  const AttentionShape& s = site_.shape();
  const Tensor k = split_heads(in.k, s), v = split_heads(in.v, s);
  // Each position weighs the source by its own decays: keep it all.
  auto state = std::make_unique<AlignedState>();
  state->key = plain_->masked_key_features(k, in.padding());
  state->value = append_ones(v);
  if (gate_) state->plain = matmul(state->key, state->value, true, false);  // and the plain read's S'
  return state;
}

Tensor AlignedCrossAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const {
  check_one_row_at_position("aligned", in.q, position);
  const auto& s = static_cast<const AlignedState&>(state);
  const Tensor q = split_heads(in.q, site_.shape());
  if (!gate_) return merge_heads(step_heads(q, s, position));
  return merge_heads(gate_->mix(step_heads(q, s, position), plain_->read(q, s.plain), in.x));
}

Tensor AlignedCrossAttention::step_heads(const Tensor& q, const AlignedState& s, int64_t position) const {
  // Row i of context()'s sum, term by term: weights c_j = γ_h^|i - j| φ(q)·φ(k_j) over the
  // cached source features (padded rows zero), O(source length) a token.
  const int64_t heads = site_.shape().heads, nk = s.key.size(2);
  Tensor decay = Tensor::empty({1, heads, 1, nk});
  float* p = decay.f32();
  // One pow an entry: the distances |i - j| are nearly all distinct here, so a table of powers
  // (context()'s) would only add the ones no key is at, all of 0..i past the source's end.
  for (int64_t h = 0; h < heads; ++h) {
    const double g = site_.config().head_decay(h);
    for (int64_t j = 0; j < nk; ++j)
      p[h * nk + j] = static_cast<float>(std::pow(g, static_cast<double>(std::abs(position - j))));
  }
  const Tensor w = mul(matmul(plain_->features().query_features(q), s.key, false, true), decay.to(q.device()));
  return normalise(matmul(w, s.value), static_cast<float>(site_.config().eps));  // (B, H, 1, dh)
}

}  // namespace tarn
