// Routed attention's part of the recipe (layers/attention/settings.h): its chunk and how many
// chunks each target position reads exactly; cross-attention only.
#include "layers/attention/settings.h"

namespace tarn {

AttentionKindSettings routed_settings() {
  AttentionKindSettings s;
  s.ignored = [](const AttentionConfig&, AttentionUse, const std::string& key) -> std::string {
    return key == "route_chunk" || key == "route_top" ? "" : "ignored: kind is routed";
  };
  s.check = [](const AttentionConfig&, AttentionUse use, const SettingReport& report) {
    if (!use.cross)
      report.error("kind", "routed is cross-attention only: it chooses source chunks for each target position");
  };
  return s;
}

}  // namespace tarn
