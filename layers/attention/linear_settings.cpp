// Linear attention's part of the recipe (layers/attention/settings.h), with its feature map's,
// which hybrid attention over linear shares, and aligned cross-attention's (align_decay > 0).
#include "kernels/check.h"
#include "kernels/taylor_map.h"
#include "layers/attention/settings.h"

namespace tarn {

using kernels::cpu::FeatureMap;

bool is_feature_map_key(const std::string& key) {
  return key == "feature_map" || key == "favor_features" || key == "favor_redraw_every" || key == "eps" ||
         key == "taylor_order" || key == "taylor_dim";
}

std::string feature_map_ignored(const AttentionConfig& a, const std::string& key) {
  if ((key == "taylor_order" || key == "taylor_dim") && a.feature_map != FeatureMap::taylor)
    return "ignored: feature_map is not taylor";
  if ((key == "favor_features" || key == "favor_redraw_every") && a.feature_map != FeatureMap::favor)
    return "ignored: feature_map is not favor";
  return "";
}

std::vector<std::string> feature_map_size_keys(const AttentionConfig& a) {
  if (a.feature_map == FeatureMap::favor) return {"favor_features"};            // m features per head
  if (a.feature_map == FeatureMap::taylor) return {"taylor_dim", "taylor_order"};  // C(r + P, P) per head
  return {};
}

void check_feature_map(const AttentionConfig& a, const SettingReport& report) {
  if (a.feature_map == FeatureMap::identity)
    report.warn("feature_map", "identity makes linear attention a mean over positions: for ablations only");
  if (a.feature_map != FeatureMap::taylor) return;
  const int64_t features = kernels::cpu::taylor_feature_count(a.taylor_dim, static_cast<int>(a.taylor_order));
  if (features > kernels::cpu::kMaxTaylorFeatures)
    report.error("taylor_dim", str_cat(a.taylor_dim, " at taylor_order ", a.taylor_order, " gives ", features,
                                       " features, above the ", kernels::cpu::kMaxTaylorFeatures, " the kernels take"));
}

AttentionKindSettings linear_settings() {
  AttentionKindSettings s;
  s.ignored = [](const AttentionConfig& a, AttentionUse, const std::string& key) -> std::string {
    if (key == "conv_size" || key == "window" || key == "global") return "ignored: kind is linear";
    return is_feature_map_key(key) ? feature_map_ignored(a, key) : "";
  };
  s.check = [](const AttentionConfig& a, AttentionUse, const SettingReport& report) { check_feature_map(a, report); };
  s.size_keys = [](const AttentionConfig& a) {
    std::vector<std::string> keys = feature_map_size_keys(a);
    if (a.align_decay > 0) keys.push_back("chunk");  // aligned cross-attention's C x C scores per chunk
    return keys;
  };
  return s;
}

}  // namespace tarn
