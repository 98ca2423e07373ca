#include "framework/attention_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include "kernels/check.h"
#include "kernels/taylor_map.h"

namespace tarn {

namespace {
// The names interned by AttentionKind::named: a deque's elements never move, so each name's
// pointer stays valid for the program's life.
struct InternedKinds {
  std::mutex mutex;
  std::deque<std::string> names;
};
InternedKinds& interned() {
  static InternedKinds k;
  return k;
}
}  // namespace

AttentionKind AttentionKind::named(const std::string& name) {
  for (const AttentionKind& k : {softmax, linear, delta, gated, hybrid})
    if (name == k.name()) return k;
  InternedKinds& in = interned();
  std::lock_guard<std::mutex> lock(in.mutex);
  for (const std::string& n : in.names)
    if (n == name) return AttentionKind(n.c_str());
  in.names.push_back(name);
  return AttentionKind(in.names.back().c_str());
}

std::vector<AttentionKind> AttentionKind::all() {
  std::vector<AttentionKind> kinds = {softmax, linear, delta, gated, hybrid};
  InternedKinds& in = interned();
  std::lock_guard<std::mutex> lock(in.mutex);
  for (const std::string& n : in.names) kinds.push_back(AttentionKind(n.c_str()));
  return kinds;
}

bool AttentionKind::builtin() const {
  for (const AttentionKind& k : {softmax, linear, delta, gated, hybrid})
    if (std::strcmp(name_, k.name_) == 0) return true;
  return false;
}

bool AttentionKind::operator==(const AttentionKind& o) const {
  return name_ == o.name_ || std::strcmp(name_, o.name_) == 0;
}

std::string AttentionConfig::str() const {
  if (!kind.builtin()) return kind.name();  // a registered kind: its name (layers/attention/registry.h)
  if (is_softmax()) return "softmax";
  if (is_gated_recurrence()) return std::string(attention_kind_name(kind)) + "(conv " + std::to_string(conv_size) + ")";
  if (is_hybrid() && has_delta_block())
    return "hybrid(window " + std::to_string(window) + ", " + attention_kind_name(global) + " conv " +
           std::to_string(conv_size) + ")";
  // "taylor" at Based's settings, else "taylor order 4 r 8".
  std::string map = kernels::cpu::feature_map_name(feature_map);
  if (feature_map == FeatureMap::taylor && (taylor_order != 2 || taylor_dim != 16))
    map += " order " + std::to_string(taylor_order) + " r " + std::to_string(taylor_dim);
  if (is_hybrid()) return "hybrid(window " + std::to_string(window) + ", " + map + ")";
  if (is_aligned()) {
    std::ostringstream decay;
    decay << align_decay;
    map += ", align " + decay.str() + (align_gate ? " gated" : "");
  }
  return "linear(" + map + ")";
}

double AttentionConfig::head_decay(int64_t h) const {
  // The floor keeps every head's decay positive however many heads halve the reach (at 1e-3 a
  // head sees its aligned position alone).
  return h == 0 ? 1.0 : std::max(kMinHeadDecay, std::pow(align_decay, std::ldexp(1.0, static_cast<int>(h - 1))));
}

int64_t AttentionConfig::feature_count(int64_t head_dim) const {
  switch (feature_map) {
    case FeatureMap::favor: return favor_features > 0 ? favor_features : head_dim;
    case FeatureMap::taylor: return kernels::cpu::taylor_feature_count(taylor_dim, static_cast<int>(taylor_order));
    case FeatureMap::hedgehog: return 2 * head_dim;
    default: return head_dim;
  }
}

void AttentionConfig::validate(const std::string& key) const {
  if (is_softmax()) return;
  TARN_CHECK(chunk > 0 && chunk <= kMaxChunk, key, ".chunk: must be in [1, ", kMaxChunk, "], got ", chunk);
  if (is_hybrid()) {
    TARN_CHECK(window >= 1 && window <= kMaxWindow, key, ".window: must be in [1, ", kMaxWindow, "], got ", window);
    TARN_CHECK(global == Kind::linear || global == Kind::delta || global == Kind::gated, key,
               ".global: must be linear, delta or gated, got ", attention_kind_name(global));
  }
  if (has_delta_block()) {  // delta, gated and hybrid over them: no feature map's settings
    TARN_CHECK(conv_size >= 1, key, ".conv_size: must be >= 1 (1 = no convolution), got ", conv_size);
    return;
  }
  TARN_CHECK(favor_features >= 0 && favor_features <= kMaxFavorFeatures, key, ".favor_features: must be in [0, ",
             kMaxFavorFeatures, "] (0 = head_dim), got ", favor_features);
  TARN_CHECK(favor_redraw_every >= 0, key, ".favor_redraw_every: must be >= 0 (0 = never), got ", favor_redraw_every);
  TARN_CHECK(eps > 0, key, ".eps: must be positive, got ", eps);
  TARN_CHECK(align_decay >= 0 && align_decay < 1, key, ".align_decay: must be in [0, 1) (0 = off), got ", align_decay);
  TARN_CHECK(taylor_order == 2 || taylor_order == 4, key,
             ".taylor_order: must be 2 or 4 (an even order keeps the kernel positive), got ", taylor_order);
  TARN_CHECK(taylor_dim >= 1 && taylor_dim <= 255, key, ".taylor_dim: must be 1..255, got ", taylor_dim);
}

}  // namespace tarn
