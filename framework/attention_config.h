#pragma once
// One attention stack's settings, from the recipe to the kernels (docs/design.md sections 2, 3
// and 6). The recipe's loader parses the YAML straight into this type (framework/config/
// recipe.cpp), so every value is parsed and checked once, where the file and line are known;
// the model (layers/config.h, the kinds in layers/attention/) and the ops read these fields and never a
// string. No YAML here.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/feature_maps.h"
#include "kernels/linear_attention.h"

namespace tarn {

// softmax: exact attention, O(N^2) in length. linear: feature-map attention (Katharopoulos et
// al.), a sum of phi(k) v^T. delta: the gated delta rule (Gated DeltaNet), a state that
// overwrites what it stores under a key and decays (layers/attention/delta.h, docs/design.md). gated:
// the same layer without the delta rule's erase, S_t = alpha_t S_{t-1} + beta_t k_t v_t^T
// (Mamba-2's per-head scalar decay). hybrid: softmax over a sliding window of `window` keys plus
// a global part over the whole sequence (`global`: linear attention on the same q, k, v, or the
// delta or gated layer), mixed per head and position by a learned gate (in cross-attention the
// window is around the target position and the global part linear; layers/attention/hybrid.h).
// routed: cross-attention only, softmax over chunk means (landmarks) plus softmax over the keys
// of the route_top chunks whose landmarks score highest, mixed by a learned gate
// (layers/attention/routed.h). A kind is its name: the six above, or one a program registers
// (layers/attention/registry.h) and a recipe then names like them. Built-in kinds are
// compile-time constants; named() interns any other name, so a kind is one pointer and compares
// by name.
class AttentionKind {
 public:
  static const AttentionKind softmax, linear, delta, gated, hybrid, routed;
  static AttentionKind named(const std::string& name);  // the built-in kind of that name, or an interned one
  // The built-in kinds, then every other name interned so far, in that order (the recipe's
  // choices for `kind`: layers/attention/registry.h interns each kind it registers).
  static std::vector<AttentionKind> all();
  const char* name() const { return name_; }
  bool builtin() const;
  bool operator==(const AttentionKind& o) const;
  bool operator!=(const AttentionKind& o) const { return !(*this == o); }

 private:
  constexpr explicit AttentionKind(const char* name) : name_(name) {}
  const char* name_;
};
inline constexpr AttentionKind AttentionKind::softmax{"softmax"};
inline constexpr AttentionKind AttentionKind::linear{"linear"};
inline constexpr AttentionKind AttentionKind::delta{"delta"};
inline constexpr AttentionKind AttentionKind::gated{"gated"};
inline constexpr AttentionKind AttentionKind::hybrid{"hybrid"};
inline constexpr AttentionKind AttentionKind::routed{"routed"};
inline const char* attention_kind_name(AttentionKind kind) { return kind.name(); }

struct AttentionConfig {
  using Kind = AttentionKind;
  using FeatureMap = kernels::cpu::FeatureMap;

  Kind kind = Kind::softmax;
  // Linear attention and hybrid's global part.
  FeatureMap feature_map = FeatureMap::elu1;
  // Rows per chunk of the causal scan on the CPU. The CUDA kernels use fixed chunks (32 rows in
  // f32, 64 in bf16): a run on CUDA refuses any other value given in a recipe.
  int64_t chunk = kernels::cpu::kDefaultLinearAttentionChunk;
  static constexpr int64_t kMaxChunk = std::numeric_limits<int>::max();  // LinearAttentionOptions::chunk is an int
  int64_t favor_features = 0;      // m, the FAVOR+ feature count; 0 = head_dim
  static constexpr int64_t kMaxFavorFeatures = std::numeric_limits<int>::max();  // a BLAS (int) dimension
  int64_t favor_redraw_every = 0;  // redraw the FAVOR+ projection every K training steps; 0 = never
  double eps = kernels::cpu::kDefaultLinearAttentionEps;  // out = num / (den + eps)
  // Taylor map (kernels/taylor_map.h): the order P of exp's series (2 or 4: an even order keeps
  // the kernel positive) and r, the width of the learned projection it takes per head.
  int64_t taylor_order = 2;
  int64_t taylor_dim = 16;
  // Linear cross-attention: target position i weighs source position j by gamma_h^|i - j|, head
  // 0 with gamma_0 = 1 (the whole source), head h >= 1 with gamma_h = align_decay^(2^(h - 1))
  // (each head's reach half the last's), at least kMinHeadDecay; 0 = off (layers/attention/aligned.h,
  // docs/design.md).
  double align_decay = 0;
  static constexpr double kMinHeadDecay = 1e-3;
  // Aligned cross-attention with a gate (issue 53): per head and target position a learned
  // g = sigmoid(x W^T + b) mixes the decayed read with the plain read of the whole source,
  // g aligned + (1 - g) plain, so that a head can drop the diagonal prior where the alignment
  // is not the diagonal (a reordering, an offset). Needs align_decay > 0.
  bool align_gate = false;
  // The gate's bias at initialisation: g starts near sigmoid(align_gate_bias) (0: 1/2; -3: 0.05,
  // mostly the plain read, so that a head must learn to take the prior rather than to drop it).
  // Draws the first weights only. Needs align_gate.
  double align_gate_bias = 0;
  // Delta and gated: taps of the short causal depthwise convolution on q, k and v (1 = none).
  int64_t conv_size = 4;
  // Hybrid: the softmax window (causal: the last `window` keys; bidirectional: |i - j| <= window / 2).
  int64_t window = kDefaultHybridWindow;
  static constexpr int64_t kDefaultHybridWindow = 64;
  // Past any sequence (lengths are int32), and small enough that the kernels' index arithmetic
  // (j + window, kernels/softmax_attention.h) cannot overflow.
  static constexpr int64_t kMaxWindow = std::numeric_limits<int32_t>::max();
  // Hybrid: the global part's kind: linear (feature_map on the layer's q and k), delta or gated
  // (the gated delta rule's layer on the same projections: its convolutions, gates and output
  // norm, conv_size taps).
  Kind global = Kind::linear;
  // Routed cross-attention: source positions per chunk (each chunk's landmark is its mean key and
  // value) and the chunks each target position reads exactly.
  int64_t route_chunk = 16;
  int64_t route_top = 4;
  // Landmarks of landmarks, as many levels as max_positions needs for at most route_root at the
  // top (0: one level): a tree read from the top (layers/attention/routed.h).
  int64_t route_root = 0;
  // With a tree: the landmarks chosen at each level above the keys' chunks (0: route_top). A
  // wider choice up there, where a landmark averages many keys, finds the chunks the flat read
  // would choose more often (docs/measurements.md), for more scores a level (route_beam x
  // route_chunk). At most kMaxRouteBeam: CUDA chooses in insertion lists of kernels::kChunkMaxTop
  // (layers/attention/routed.cpp asserts the two agree).
  int64_t route_beam = 0;
  static constexpr int64_t kMaxRouteBeam = 64;

  bool is_linear() const { return kind == Kind::linear; }
  bool is_hybrid() const { return kind == Kind::hybrid; }
  bool is_routed() const { return kind == Kind::routed; }
  // linear, and hybrid over linear: a feature map's settings (feature_map, favor_*, eps) apply.
  bool uses_feature_map() const { return kind == Kind::linear || (kind == Kind::hybrid && global == Kind::linear); }
  bool is_delta() const { return kind == Kind::delta; }
  // delta and gated: a state written through learned gates (layers/delta_rule_block.h).
  bool is_gated_recurrence() const { return kind == Kind::delta || kind == Kind::gated; }
  // delta and gated, and hybrid over either: the layer holds a DeltaRuleBlock and its state.
  bool has_delta_block() const { return is_gated_recurrence() || (kind == Kind::hybrid && global != Kind::linear); }
  // The delta rule's erase (kernels/delta_rule.h): delta, and hybrid over delta.
  bool erases() const { return kind == Kind::delta || (kind == Kind::hybrid && global == Kind::delta); }
  bool is_softmax() const { return kind == Kind::softmax; }
  bool is_aligned() const { return kind == Kind::linear && align_decay > 0; }
  bool is_gated_aligned() const { return is_aligned() && align_gate; }
  // Aligned cross-attention's decay of head h of `heads` (see align_decay).
  double head_decay(int64_t h) const;
  // Features per head of the feature map for heads of head_dim (favor: m; taylor: C(r + P, P);
  // hedgehog: 2 head_dim; the row-local maps keep head_dim).
  int64_t feature_count(int64_t head_dim) const;
  static AttentionConfig softmax_attention() { return {}; }
  static AttentionConfig linear_attention(FeatureMap map = FeatureMap::elu1) {
    AttentionConfig c;
    c.kind = Kind::linear;
    c.feature_map = map;
    return c;
  }
  // "softmax", "linear(elu1)", "linear(taylor, align 0.9)", "delta(conv 4)", "gated(conv 4)",
  // "hybrid(window 64, elu1)", "hybrid(window 64, delta conv 4)"
  std::string str() const;
  // Throws tarn::Error naming `key`.field for a value out of the range its recipe key declares
  // (framework/attention_config_keys.h: the recipe's loader checks the same declaration, with the
  // file and line). The rules between keys are the kinds' (layers/attention/settings.h), which
  // BartConfig::validate applies.
  void validate(const std::string& key) const;
};

}  // namespace tarn
