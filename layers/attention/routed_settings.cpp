// Routed attention's part of the recipe (layers/attention/settings.h): its chunk and how many
// chunks each target position reads exactly, and the tree's root and beam; cross-attention only.
#include "layers/attention/settings.h"

namespace tarn {

bool is_routed_key(const std::string& key) {
  return key == "route_chunk" || key == "route_top" || key == "route_root" || key == "route_beam";
}

AttentionKindSettings routed_settings() {
  AttentionKindSettings s;
  s.ignored = [](const AttentionConfig& a, AttentionUse, const std::string& key) -> std::string {
    if (key == "route_beam")
      return a.route_root > 0 ? "" : "ignored: route_root is 0 (one level: nothing above the chunks)";
    return is_routed_key(key) ? "" : "ignored: kind is routed";
  };
  s.check = [](const AttentionConfig& a, AttentionUse use, const SettingReport& report) {
    if (!use.cross)
      report.error("kind", "routed is cross-attention only: it chooses source chunks for each target position");
    if (a.route_root > 0 && a.route_chunk < 2)
      report.error("route_root", "a tree of landmarks needs route_chunk of 2 or more (chunks of 1 never shrink)");
  };
  return s;
}

}  // namespace tarn
