// Hybrid attention's part of the recipe (layers/attention/settings.h): its window and global
// part, and then the global part's settings (a feature map's, or the delta rule's).
#include "kernels/check.h"
#include "layers/attention/settings.h"

namespace tarn {
namespace {

// Hybrid cross-attention mixes the window with linear attention only: delta and gated read the
// source through a state written once, which has no window to share the projections with.
constexpr const char* kCrossHybridGlobal =
    "hybrid cross-attention takes global: linear (a feature map); delta and gated are self-attention only "
    "under hybrid (use kind: delta or gated on their own in cross-attention)";

bool recurrent_global(const AttentionConfig& a) { return a.global != AttentionKind::linear; }

}  // namespace

AttentionKindSettings hybrid_settings() {
  AttentionKindSettings s;
  s.ignored = [](const AttentionConfig& a, AttentionUse use, const std::string& key) -> std::string {
    if (key == "window" || key == "global" || key == "chunk") return "";
    if (use.cross && recurrent_global(a)) return "";  // an error (check), not a warning
    const std::string ignored = str_cat("ignored: global is ", a.global.name());
    if (recurrent_global(a)) return key == "conv_size" ? "" : ignored;
    if (key == "conv_size") return ignored;
    if (key == "align_decay") return "ignored: kind is hybrid (its window aligns)";
    return is_feature_map_key(key) ? feature_map_ignored(a, key) : "";
  };
  s.check = [](const AttentionConfig& a, AttentionUse use, const SettingReport& report) {
    if (use.cross && recurrent_global(a)) {
      report.error("global", kCrossHybridGlobal);
      return;
    }
    if (!recurrent_global(a)) check_feature_map(a, report);
  };
  s.size_keys = [](const AttentionConfig& a) {
    std::vector<std::string> keys = {"window"};
    if (recurrent_global(a)) keys.push_back("conv_size");
    else for (const std::string& k : feature_map_size_keys(a)) keys.push_back(k);
    return keys;
  };
  return s;
}

}  // namespace tarn
