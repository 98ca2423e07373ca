#include "layers/attention/routed.h"

#include <algorithm>
#include <cmath>

#include "framework/ops/chunk_attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
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

RoutedSource routed_source(const Tensor& key, const Tensor& value, const Tensor& key_padding, int64_t chunk) {
  RoutedSource src;
  src.key = key;
  src.value = value;
  src.key_padding = key_padding;
  ChunkMeans keys = chunk_mean(key, key_padding, chunk);
  src.landmark_key = keys.mean;  // (B, H, Nc, dh)
  src.landmark_value = chunk_mean(value, key_padding, chunk).mean;
  src.chunk_empty = keys.empty;  // (B, Nc)
  src.landmark_bias = scale(keys.empty, kMaskedScore).view({key.size(0), 1, 1, keys.empty.size(1)});
  return src;
}

RoutedReads routed_reads(const Tensor& q, const RoutedSource& src, int64_t chunk, int64_t top, float scaling,
                         Precision precision) {
  // compressed: softmax over the landmarks
  const Tensor landmark_scores =
      add(matmul(scale(q, scaling), src.landmark_key, false, true, precision), src.landmark_bias);
  RoutedReads r;
  r.compressed = matmul(softmax(landmark_scores), src.landmark_value, false, false, precision);
  // selected: softmax over the keys of the best `top` chunks (f32 in every precision: the read is
  // O(top chunk dh) a query, small beside the projections)
  const Tensor chosen = chunk_choose(landmark_scores, src.chunk_empty, std::min(top, src.chunk_empty.size(1)));
  r.selected = chunk_attention(q, src.key, src.value, chosen, chunk, src.key_padding, scaling);
  return r;
}

RoutedSource RoutedAttention::prepare(const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  const AttentionShape& s = site_.shape();
  const int64_t batch = k.size(0), nk = k.size(1);
  check_padding("routed attention", pad, batch, nk);
  return routed_source(split_heads(k, s), split_heads(v, s), padding_tensor(pad, batch, nk, k.device()), chunk_);
}

Tensor RoutedAttention::read(const Tensor& q, const RoutedSource& src, const Tensor& x) const {
  const RoutedReads r = routed_reads(q, src, chunk_, top_, scaling_, site_.precision());
  return merge_heads(gate_.mix(r.selected, r.compressed, x));
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
