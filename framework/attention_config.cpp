#include "framework/attention_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include "framework/attention_config_keys.h"
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
  for (const AttentionKind& k : {softmax, linear, delta, gated, hybrid, routed})
    if (name == k.name()) return k;
  InternedKinds& in = interned();
  std::lock_guard<std::mutex> lock(in.mutex);
  for (const std::string& n : in.names)
    if (n == name) return AttentionKind(n.c_str());
  in.names.push_back(name);
  return AttentionKind(in.names.back().c_str());
}

std::vector<AttentionKind> AttentionKind::all() {
  std::vector<AttentionKind> kinds = {softmax, linear, delta, gated, hybrid, routed};
  InternedKinds& in = interned();
  std::lock_guard<std::mutex> lock(in.mutex);
  for (const std::string& n : in.names) kinds.push_back(AttentionKind(n.c_str()));
  return kinds;
}

bool AttentionKind::builtin() const {
  for (const AttentionKind& k : {softmax, linear, delta, gated, hybrid, routed})
    if (std::strcmp(name_, k.name_) == 0) return true;
  return false;
}

bool AttentionKind::operator==(const AttentionKind& o) const {
  return name_ == o.name_ || std::strcmp(name_, o.name_) == 0;
}

std::string AttentionConfig::str() const {
  if (!kind.builtin()) return kind.name();  // a registered kind: its name (layers/attention/registry.h)
  if (is_softmax()) return "softmax";
  if (is_routed())
    return "routed(chunk " + std::to_string(route_chunk) + ", top " + std::to_string(route_top) +
           (route_root > 0 ? ", root " + std::to_string(route_root) : std::string()) +
           (route_root > 0 && route_beam > 0 ? ", beam " + std::to_string(route_beam) : std::string()) + ")";
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
    std::ostringstream align;
    align << ", align " << align_decay;
    if (align_gate) align << " gated";
    if (align_gate && align_gate_bias != 0) align << " from " << align_gate_bias;
    map += align.str();
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
  // The ranges the recipe's keys have, declared once (framework/attention_config_keys.h); the
  // schema is made anew because the kinds a program registers join the choices of `kind`.
  config::Schema schema("attention setting");
  declare_attention_setting(schema.root<AttentionConfig>(), /*causal=*/false);
  schema.check_values(*this, [&](const std::string& path, const std::string& message) {
    throw Error(str_cat(key, ".", path, ": ", message));
  });
}

}  // namespace tarn
