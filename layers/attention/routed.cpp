#include "layers/attention/routed.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "framework/ops/chunk_attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "kernels/check.h"
#include "layers/attention/registry.h"

namespace tarn {
namespace {

// Added to masked scores before a softmax: exp() of it is 0 in f32, and unlike -inf a row with
// every key masked (a source of padding only) stays finite.
constexpr float kMaskedScore = -1e9f;

constexpr const char* kCrossOnly = "attention: kind routed is cross-attention only";

}  // namespace

RoutedAttention::RoutedAttention(AttentionSite& site)
    : site_(site),
      chunk_(site.config().route_chunk),
      top_(site.config().route_top),
      scaling_(1.0f / std::sqrt(static_cast<float>(site.shape().head_dim))),
      gate_(site, "route_gate") {
  TARN_CHECK(site.shape().cross, kCrossOnly);
}

double RoutedAttention::parameters(const AttentionConfig&, const AttentionSizes& s) {
  const double h = std::max(1.0, s.heads);
  return s.d_model * h + h;
}

double RoutedAttention::decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens) {
  const double chunks = std::ceil(tokens / static_cast<double>(std::max<int64_t>(1, a.route_chunk)));
  return 2 * 4.0 * (tokens + chunks) * s.d_model + 4.0 * tokens;
}

AttentionTrainingBytes RoutedAttention::training_bytes(const AttentionConfig& a, const AttentionSizes& s,
                                                       const AttentionBatch& b) {
  const double chunks = std::ceil(b.keys / static_cast<double>(std::max<int64_t>(1, a.route_chunk)));
  return {2 * 4.0 * s.heads * b.tokens * chunks, 0.0};
}

void RoutedAttention::export_settings(const AttentionConfig& a, json::Json& o) {
  o["route_chunk"] = a.route_chunk;
  o["route_top"] = a.route_top;
}

RoutedSource RoutedAttention::prepare(const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  const AttentionShape& s = site_.shape();
  const int64_t batch = k.size(0), nk = k.size(1), chunks = (nk + chunk_ - 1) / chunk_;
  check_padding("routed attention", pad, batch, nk);
  // pool (B, H, Nk, Nc): 1 / (unpadded keys of chunk c) where key j is one of them, so that
  // pool^T k is each chunk's mean key. The same for every head.
  std::vector<float> pool(static_cast<size_t>(batch * nk * chunks), 0.0f), bias(static_cast<size_t>(batch * chunks));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * chunk_, end = std::min(nk, begin + chunk_);
      int64_t kept = 0;
      for (int64_t j = begin; j < end; ++j) kept += pad.empty() || !pad[b * nk + j];
      bias[b * chunks + c] = kept == 0 ? kMaskedScore : 0.0f;
      for (int64_t j = begin; j < end; ++j)
        if (pad.empty() || !pad[b * nk + j]) pool[(b * nk + j) * chunks + c] = 1.0f / static_cast<float>(kept);
    }
  std::vector<float> pool_heads;
  pool_heads.reserve(pool.size() * s.heads);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      pool_heads.insert(pool_heads.end(), pool.begin() + b * nk * chunks, pool.begin() + (b + 1) * nk * chunks);
  const Tensor pooling = Tensor::from_vector(pool_heads, {batch, s.heads, nk, chunks}).to(k.device());

  RoutedSource src;
  src.key = split_heads(k, s);
  src.value = split_heads(v, s);
  const Precision precision = site_.precision();
  src.landmark_key = matmul(pooling, src.key, true, false, precision);  // (B, H, Nc, dh)
  src.landmark_value = matmul(pooling, src.value, true, false, precision);
  src.landmark_bias = Tensor::from_vector(bias, {batch, 1, 1, chunks}).to(k.device());
  src.key_padding = padding_tensor(pad, batch, nk, k.device());
  return src;
}

std::vector<int32_t> RoutedAttention::choose(const Tensor& landmark_scores) const {
  const int64_t rows = landmark_scores.numel() / landmark_scores.size(3), chunks = landmark_scores.size(3),
                top = std::min(top_, chunks);
  const std::vector<float> scores = landmark_scores.to_vector();
  std::vector<int32_t> chosen(static_cast<size_t>(rows * top), -1);
  std::vector<int32_t> order(static_cast<size_t>(chunks));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = scores.data() + r * chunks;
    std::iota(order.begin(), order.end(), 0);
    // equal scores keep the earlier chunk
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int32_t x, int32_t y) { return row[x] > row[y] || (row[x] == row[y] && x < y); });
    for (int64_t t = 0; t < top; ++t)
      if (row[order[t]] > kMaskedScore / 2) chosen[r * top + t] = order[t];  // else a chunk of padding only
  }
  return chosen;
}

Tensor RoutedAttention::selected_read(const Tensor& q, const RoutedSource& src, std::vector<int32_t> chosen) const {
  const int64_t batch = q.size(0), heads = q.size(1), nq = q.size(2), nk = src.key.size(2);
  const int64_t top = std::min(top_, src.landmark_key.size(2));  // choose()'s stride
  if (q.device().is_cpu() && site_.precision() == Precision::f32)
    return chunk_attention(q, src.key, src.value, std::move(chosen), chunk_, top, src.key_padding, scaling_);
  // Elsewhere the same read composed: every key scored, those outside the chosen chunks masked.
  const std::vector<float> padded = src.key_padding.defined() ? src.key_padding.to_vector() : std::vector<float>();
  std::vector<float> bias(static_cast<size_t>(batch * heads * nq * nk), kMaskedScore);
  std::vector<float> seen(static_cast<size_t>(batch * heads * nq), 0.0f);  // 1 where a row sees a key
  for (int64_t r = 0; r < batch * heads * nq; ++r) {
    const int64_t b = r / (heads * nq);
    for (int64_t t = 0; t < top; ++t) {
      const int32_t c = chosen[r * top + t];
      if (c < 0) continue;
      for (int64_t j = c * chunk_; j < std::min(nk, (c + 1) * chunk_); ++j)
        if (padded.empty() || padded[b * nk + j] == 0.0f) {
          bias[r * nk + j] = 0.0f;
          seen[r] = 1.0f;
        }
    }
  }
  const Precision precision = site_.precision();
  const Tensor scores = add(matmul(scale(q, scaling_), src.key, false, true, precision),
                            Tensor::from_vector(bias, {batch, heads, nq, nk}).to(q.device()));
  // A row that sees no key reads zeros, as chunk_attention gives (a softmax of masks only is uniform).
  return mul(matmul(softmax(scores), src.value, false, false, precision),
             Tensor::from_vector(seen, {batch, heads, nq, 1}).to(q.device()));
}

Tensor RoutedAttention::read(const Tensor& q, const RoutedSource& src, const Tensor& x) const {
  const Precision precision = site_.precision();
  // compressed: softmax over the landmarks
  const Tensor landmark_scores =
      add(matmul(scale(q, scaling_), src.landmark_key, false, true, precision), src.landmark_bias);
  const Tensor compressed = matmul(softmax(landmark_scores), src.landmark_value, false, false, precision);
  // selected: softmax over the keys of the best route_top chunks
  const Tensor selected = selected_read(q, src, choose(landmark_scores));
  return merge_heads(gate_.mix(selected, compressed, x));
}

Tensor RoutedAttention::forward(const AttentionInputs& in) const {
  TARN_CHECK(site_.shape().cross, kCrossOnly);
  return read(split_heads(in.q, site_.shape()), prepare(in.k, in.v, in.padding()), in.x);
}

std::unique_ptr<DecodeState> RoutedAttention::start_self(int64_t) const { throw Error(kCrossOnly); }

Tensor RoutedAttention::step_self(const AttentionInputs&, DecodeState&) const { throw Error(kCrossOnly); }

std::unique_ptr<DecodeState> RoutedAttention::precompute_cross(const AttentionInputs& in) const {
  return std::make_unique<RoutedSource>(prepare(in.k, in.v, in.padding()));
}

Tensor RoutedAttention::step_cross(const AttentionInputs& in, const DecodeState& state, int64_t) const {
  return read(split_heads(in.q, site_.shape()), static_cast<const RoutedSource&>(state), in.x);
}

// The registry's entry of routed attention (builtin_kinds.inc).
AttentionKindEntry routed_entry() {
  AttentionKindEntry e;
  e.name = "routed";
  e.make = [](AttentionSite& s) -> std::unique_ptr<AttentionKindLayer> { return std::make_unique<RoutedAttention>(s); };
  e.parameters = RoutedAttention::parameters;
  e.decode_state_bytes = RoutedAttention::decode_state_bytes;
  e.training_bytes = RoutedAttention::training_bytes;
  e.export_settings = RoutedAttention::export_settings;
  e.settings = routed_settings();
  return e;
}

}  // namespace tarn
