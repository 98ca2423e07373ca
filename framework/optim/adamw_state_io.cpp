#include "framework/optim/adamw_state_io.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>

namespace tarn {
namespace {

constexpr const char* kOptimizerKey = "optimizer";
constexpr const char* kOptimizerName = "adamw";
constexpr const char* kStepCountKey = "step_count";
constexpr const char* kStepPrefix = "step.";
constexpr const char* kExpAvgPrefix = "exp_avg.";
constexpr const char* kExpAvgSqPrefix = "exp_avg_sq.";

bool strip_prefix(const std::string& s, const std::string& prefix, std::string* rest) {
  if (s.size() <= prefix.size() || s.compare(0, prefix.size(), prefix) != 0) return false;
  *rest = s.substr(prefix.size());
  return true;
}

int64_t parse_count(const SafetensorsMetadata& metadata, const std::string& key, std::string_view source) {
  const auto it = metadata.find(key);
  TARN_CHECK(it != metadata.end(), source, ": metadata has no \"", key, "\"");
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  TARN_CHECK(!text.empty() && errno == 0 && *end == '\0' && v >= 0, source, ": metadata \"", key,
             "\" must be a count >= 0, got \"", text, "\"");
  return v;
}

}  // namespace

FlatOptimizerState flatten_adamw_state(const AdamWState& state) {
  FlatOptimizerState flat;
  flat.metadata[kOptimizerKey] = kOptimizerName;
  flat.metadata[kStepCountKey] = std::to_string(state.step_count);
  for (const auto& [name, p] : state.params) {
    flat.tensors.emplace_back(kExpAvgPrefix + name, p.exp_avg);
    flat.tensors.emplace_back(kExpAvgSqPrefix + name, p.exp_avg_sq);
    flat.metadata[kStepPrefix + name] = std::to_string(p.step);
  }
  return flat;
}

AdamWState unflatten_adamw_state(const TensorList& tensors, const SafetensorsMetadata& metadata,
                                 std::string_view source) {
  const auto kind = metadata.find(kOptimizerKey);
  TARN_CHECK(kind == metadata.end() || kind->second == kOptimizerName, source, ": metadata \"", kOptimizerKey,
             "\" must be \"", kOptimizerName, "\", got \"", kind == metadata.end() ? "" : kind->second, "\"");
  AdamWState state;
  state.step_count = parse_count(metadata, kStepCountKey, source);
  std::map<std::string, std::pair<bool, bool>> seen;  // name -> (exp_avg, exp_avg_sq) present
  for (const auto& [key, t] : tensors) {
    std::string name;
    if (strip_prefix(key, kExpAvgSqPrefix, &name)) {
      state.params[name].exp_avg_sq = t;
      seen[name].second = true;
    } else if (strip_prefix(key, kExpAvgPrefix, &name)) {
      state.params[name].exp_avg = t;
      seen[name].first = true;
    } else {
      throw Error(str_cat(source, ": unexpected tensor \"", key, "\" (expected ", kExpAvgPrefix, "<param> or ",
                          kExpAvgSqPrefix, "<param>)"));
    }
  }
  for (auto& [name, p] : state.params) {
    TARN_CHECK(seen[name].first, source, ": ", kExpAvgSqPrefix, name, " has no matching ", kExpAvgPrefix, name);
    TARN_CHECK(seen[name].second, source, ": ", kExpAvgPrefix, name, " has no matching ", kExpAvgSqPrefix, name);
    p.step = parse_count(metadata, kStepPrefix + name, source);
  }
  return state;
}

}  // namespace tarn
