#pragma once
// The recipe's side of an attention kind (docs/design.md, "Attention kinds"): which keys of a
// setting (AttentionConfig, framework/attention_config.h) the kind reads, which of them scale its
// memory, and the rules between them. The recipe's loader reports what these say at the keys'
// lines; BartConfig::validate throws on the same rules. Kernel-free, so that the recipe's loader
// and its fuzzer link it without the layers and kernels: each built-in kind writes its part in
// its own <kind>_settings.cpp (the list is builtin_kinds.inc, the one a built-in kind joins); a
// program's kind brings its part in its AttentionKindEntry (registry.h).
#include <functional>
#include <string>
#include <vector>

#include "framework/attention_config.h"

namespace tarn {

// Where a setting serves: cross-attention (target to source), or self-attention, causal in the
// decoder.
struct AttentionUse {
  bool cross = false;
  bool causal = false;
};

// What a check says of one key of a setting ("align_decay", relative to the setting): an error,
// or a warning for something accepted but probably not meant.
struct SettingReport {
  std::function<void(const std::string& key, const std::string& message)> error;
  std::function<void(const std::string& key, const std::string& message)> warn;
};

struct AttentionKindSettings {
  // Why the kind ignores `key` of the setting `a` where it serves as `use` ("ignored: kind is
  // softmax"), or "" when it reads it. Null: the kind reads none of the settings beyond `kind`.
  std::function<std::string(const AttentionConfig& a, AttentionUse use, const std::string& key)> ignored;
  // The rules between the setting's keys beyond each key's own range (the recipe's schema checks
  // those). Null: none.
  std::function<void(const AttentionConfig& a, AttentionUse use, const SettingReport& report)> check;
  // The integer keys whose values scale the kind's memory (the estimate's sizes, which a refusal
  // for lack of memory may name). Null: none.
  std::function<std::vector<std::string>(const AttentionConfig& a)> size_keys;
};

// Adds or replaces the settings of the kind `name` (register_attention_kind calls it).
void register_attention_kind_settings(const std::string& name, AttentionKindSettings settings);
// The settings of `kind`: a built-in kind's, a registered one's, else none (every key ignored).
AttentionKindSettings attention_kind_settings(AttentionKind kind);

// The rules of the setting `a` serving as `use`: first those of alignment, which hold whatever the
// kind (align_decay is cross-attention's; align_gate needs it), then the kind's own.
void check_attention_alignment(const AttentionConfig& a, AttentionUse use, const SettingReport& report);
void check_attention_kind(const AttentionConfig& a, AttentionUse use, const SettingReport& report);
// Why a's kind ignores `key` ("" when it reads it).
std::string ignored_attention_key(const AttentionConfig& a, AttentionUse use, const std::string& key);
// The keys of a setting a kind may read or ignore, in the schema's order (`kind` and `causal`
// excluded: every kind has them).
const std::vector<std::string>& attention_setting_keys();
// Whether `key` scales a's memory.
bool attention_size_key(const AttentionConfig& a, const std::string& key);

// The built-in kinds' parts, each in its kind's <kind>_settings.cpp (builtin_kinds.inc lists them).
#define TARN_ATTENTION_KIND(name) AttentionKindSettings name##_settings();
#include "layers/attention/builtin_kinds.inc"
#undef TARN_ATTENTION_KIND

// Shared by the kinds with a feature map (linear, and hybrid over linear): the keys the map's
// settings ignore ("ignored: feature_map is not taylor"), their memory sizes, and their rules.
std::string feature_map_ignored(const AttentionConfig& a, const std::string& key);
std::vector<std::string> feature_map_size_keys(const AttentionConfig& a);
void check_feature_map(const AttentionConfig& a, const SettingReport& report);
bool is_feature_map_key(const std::string& key);

// Routed attention's own keys (route_chunk, route_top, route_root, route_beam): no other kind
// reads them (routed_settings.cpp).
bool is_routed_key(const std::string& key);

}  // namespace tarn
