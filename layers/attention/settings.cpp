#include "layers/attention/settings.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "kernels/check.h"

namespace tarn {
namespace {

// Aligned decay pairs a target position with the source position of the same index: there is
// no second sequence to align with in self-attention (kind gated decays there).
constexpr const char* kSelfAlignDecay =
    "cross-attention only: it weighs source position j by its distance from target position i (for a decay in "
    "self-attention, use kind: gated or delta)";
constexpr const char* kAlignGateNeedsDecay = "needs align_decay > 0 (the decayed read it gates)";
constexpr const char* kAlignGateBiasNeedsGate = "needs align_gate: true (the gate it starts)";

// The built-in kinds' parts (builtin_kinds.inc), then those programs registered.
struct SettingsRegistry {
  std::mutex mutex;
  std::map<std::string, AttentionKindSettings> kinds = {
#define TARN_ATTENTION_KIND(name) {#name, name##_settings()},
#include "layers/attention/builtin_kinds.inc"
#undef TARN_ATTENTION_KIND
  };
};

SettingsRegistry& settings_registry() {
  static SettingsRegistry r;
  return r;
}

}  // namespace

void register_attention_kind_settings(const std::string& name, AttentionKindSettings settings) {
  SettingsRegistry& r = settings_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.kinds[name] = std::move(settings);
}

AttentionKindSettings attention_kind_settings(AttentionKind kind) {
  SettingsRegistry& r = settings_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.kinds.find(kind.name());
  return it == r.kinds.end() ? AttentionKindSettings{} : it->second;
}

const std::vector<std::string>& attention_setting_keys() {
  // The order the recipe warns in.
  static const std::vector<std::string> keys = {"conv_size",  "window",       "global",    "feature_map",
                                                "favor_features", "favor_redraw_every", "eps", "taylor_order",
                                                "taylor_dim", "align_decay", "chunk", "route_chunk", "route_top",
                                                "route_root", "route_beam"};
  return keys;
}

void check_attention_alignment(const AttentionConfig& a, AttentionUse use, const SettingReport& report) {
  if (!use.cross && a.align_decay > 0) report.error("align_decay", kSelfAlignDecay);
  if (a.align_gate && !(a.align_decay > 0)) report.error("align_gate", kAlignGateNeedsDecay);
  if (a.align_gate_bias != 0 && !a.align_gate) report.error("align_gate_bias", kAlignGateBiasNeedsGate);
}

void check_attention_kind(const AttentionConfig& a, AttentionUse use, const SettingReport& report) {
  const AttentionKindSettings s = attention_kind_settings(a.kind);
  if (s.check) s.check(a, use, report);
}

std::string ignored_attention_key(const AttentionConfig& a, AttentionUse use, const std::string& key) {
  // Routed attention's keys are its own: no other kind reads them.
  if (is_routed_key(key) && a.kind != AttentionKind::routed)
    return str_cat("ignored: kind is ", a.kind.name());
  const AttentionKindSettings s = attention_kind_settings(a.kind);
  return s.ignored ? s.ignored(a, use, key) : str_cat("ignored: kind is ", a.kind.name());
}

bool attention_size_key(const AttentionConfig& a, const std::string& key) {
  const AttentionKindSettings s = attention_kind_settings(a.kind);
  if (!s.size_keys) return false;
  const std::vector<std::string> keys = s.size_keys(a);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace tarn
