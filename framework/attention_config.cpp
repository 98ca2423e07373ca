#include "framework/attention_config.h"

#include "kernels/check.h"

namespace tarn {

const char* attention_kind_name(AttentionKind kind) { return kind == AttentionKind::linear ? "linear" : "softmax"; }

std::string AttentionConfig::str() const {
  if (!is_linear()) return "softmax";
  return std::string("linear(") + kernels::cpu::feature_map_name(feature_map) + ")";
}

void AttentionConfig::validate(const std::string& key) const {
  if (!is_linear()) return;
  TARN_CHECK(chunk > 0, key, ".chunk: must be positive, got ", chunk);
  TARN_CHECK(favor_features >= 0, key, ".favor_features: must be >= 0 (0 = head_dim), got ", favor_features);
  TARN_CHECK(favor_redraw_every >= 0, key, ".favor_redraw_every: must be >= 0 (0 = never), got ", favor_redraw_every);
  TARN_CHECK(eps > 0, key, ".eps: must be positive, got ", eps);
}

}  // namespace tarn
