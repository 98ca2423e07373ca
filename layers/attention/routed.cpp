#include "layers/attention/routed.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/ops/chunk_attention.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn.h"
#include "kernels/cuda_chunk_attention.h"
#include "layers/attention/registry.h"

namespace tarn {
namespace {

// Added to masked scores before a softmax: exp() of it is 0 in f32, and unlike -inf a row with
// every key masked (a source of padding only) stays finite.
constexpr float kMaskedScore = -1e9f;

constexpr const char* kCrossOnly = "attention: kind routed is cross-attention only";

// The recipe's bound on route_beam is the most chunks CUDA's chunk_choose and chunk_attention_choose
// keep in their insertion lists.
static_assert(AttentionConfig::kMaxRouteBeam == kernels::kChunkMaxTop, "route_beam's bound is CUDA's");

}  // namespace

RoutedAttention::RoutedAttention(AttentionSite& site)
    : site_(site),
      chunk_(site.config().route_chunk),
      top_(site.config().route_top),
      beam_(site.config().route_beam > 0 ? site.config().route_beam : site.config().route_top),
      levels_(routed_levels(chunk_, site.config().route_root, site.shape().max_keys)),
      scaling_(1.0f / std::sqrt(static_cast<float>(site.shape().head_dim))),
      gate_(site, "route_gate") {
  TARN_CHECK(site.shape().cross, kCrossOnly);
}

double RoutedAttention::parameters(const AttentionConfig&, const AttentionSizes& s) {
  const double h = std::max(1.0, s.heads);
  return s.d_model * h + h;
}

namespace {

// The landmarks of each level, level 1 first, of a tree for sources of up to `keys` positions:
// levels added while the top holds more than `root` (none when root is 0; chunks of 1 never
// shrink, and the recipe refuses them with a root). Doubles: the estimates take schema maxima.
std::vector<double> level_sizes(double chunk, double root, double keys) {
  std::vector<double> n = {std::ceil(keys / chunk)};
  while (root > 0 && chunk >= 2 && n.back() > root) n.push_back(std::ceil(n.back() / chunk));
  return n;
}

// The same for an attention setting, as deep as a source of `keys` needs. A model for longer
// sources has more levels above: its top is then smaller (the training estimate an upper bound)
// and its sum a little larger.
std::vector<double> level_sizes(const AttentionConfig& a, double keys) {
  return level_sizes(static_cast<double>(std::max<int64_t>(1, a.route_chunk)), static_cast<double>(a.route_root),
                     keys);
}

}  // namespace

double RoutedAttention::decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens) {
  double landmarks = 0;
  for (double n : level_sizes(a, tokens)) landmarks += n;
  return 2 * 4.0 * (tokens + landmarks) * s.d_model + 4.0 * tokens;
}

AttentionTrainingBytes RoutedAttention::training_bytes(const AttentionConfig& a, const AttentionSizes& s,
                                                       const AttentionBatch& b) {
  // the top level's scores and their softmax, per head, query and landmark
  return {2 * 4.0 * s.heads * b.tokens * level_sizes(a, b.keys).back(), 0.0};
}

void RoutedAttention::export_settings(const AttentionConfig& a, json::Json& o) {
  o["route_chunk"] = a.route_chunk;
  o["route_top"] = a.route_top;
  o["route_root"] = a.route_root;
  o["route_beam"] = a.route_beam;
}

int64_t routed_levels(int64_t chunk, int64_t root, int64_t max_keys) {
  TARN_CHECK(root == 0 || chunk >= 2, "routed attention: a tree of landmarks (route_root ", root,
             ") needs route_chunk >= 2");
  return static_cast<int64_t>(
      level_sizes(static_cast<double>(chunk), static_cast<double>(root), static_cast<double>(max_keys)).size());
}

RoutedSource routed_source(const Tensor& key, const Tensor& value, const Tensor& key_padding, int64_t chunk,
                           int64_t levels) {
  TARN_CHECK(levels >= 1, "routed attention: ", levels, " levels of landmarks");
  RoutedSource src;
  src.key = key;
  src.value = value;
  src.key_padding = key_padding;
  Tensor k = key, v = value, hidden = key_padding;  // the level below
  do {
    // A level's landmarks are its chunks' means over what is visible below: the keys' unpadded
    // rows, then the landmarks not of padding only.
    ChunkMeans keys = chunk_mean(k, hidden, chunk);
    src.landmark_key.push_back(keys.mean);  // (B, H, n_l, dh)
    src.landmark_value.push_back(chunk_mean(v, hidden, chunk).mean);
    src.landmark_empty.push_back(keys.empty);  // (B, n_l)
    k = src.landmark_key.back();
    v = src.landmark_value.back();
    hidden = keys.empty;
  } while (static_cast<int64_t>(src.landmark_key.size()) < levels);
  src.top_bias = scale(hidden, kMaskedScore).view({key.size(0), 1, 1, hidden.size(1)});
  return src;
}

RoutedReads routed_reads(const Tensor& q, const RoutedSource& src, int64_t chunk, int64_t top, int64_t beam,
                         float scaling, Precision precision) {
  // compressed: softmax over the top level's landmarks, all of them
  const size_t levels = src.landmark_key.size();
  const Tensor& top_key = src.landmark_key.back();
  const Tensor landmark_scores =
      add(matmul(scale(q, scaling), top_key, false, true, precision), src.top_bias);
  RoutedReads r;
  r.compressed = matmul(softmax(landmark_scores), src.landmark_value.back(), false, false, precision);
  // the `beam` best at every level above the keys' chunks, the `top` best of those
  auto picks = [&](size_t level) { return level > 0 ? beam : top; };
  Tensor chosen =
      chunk_choose(landmark_scores, src.landmark_empty.back(), std::min(picks(levels - 1), top_key.size(2)));
  // down the tree: at each level, only the children of the chunks chosen above, read (softmax)
  // and chosen among from the same scores (f32 in every precision: O(beam chunk dh) a query)
  for (size_t l = levels - 1; l-- > 0;) {
    const ChunkReadAndChoice level = chunk_attention_choose(q, src.landmark_key[l], src.landmark_value[l], chosen,
                                                            chunk, src.landmark_empty[l], scaling, picks(l));
    r.compressed = add(r.compressed, level.read);
    chosen = level.picked;
  }
  if (levels > 1) r.compressed = scale(r.compressed, 1.0f / static_cast<float>(levels));
  // selected: softmax over the keys of the best `top` chunks
  r.selected = chunk_attention(q, src.key, src.value, chosen, chunk, src.key_padding, scaling);
  return r;
}

RoutedSource RoutedAttention::prepare(const Tensor& k, const Tensor& v, const PaddingMask& pad) const {
  const AttentionShape& s = site_.shape();
  const int64_t batch = k.size(0), nk = k.size(1);
  check_padding("routed attention", pad, batch, nk);
  return routed_source(split_heads(k, s), split_heads(v, s), padding_tensor(pad, batch, nk, k.device()), chunk_,
                       levels_);
}

Tensor RoutedAttention::read(const Tensor& q, const RoutedSource& src, const Tensor& x) const {
  const RoutedReads r = routed_reads(q, src, chunk_, top_, beam_, scaling_, site_.precision());
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
