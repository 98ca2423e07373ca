// Softmax attention's part of the recipe (layers/attention/settings.h): it reads no setting
// beyond its kind (attention dropout is the model's).
#include "layers/attention/settings.h"

namespace tarn {

AttentionKindSettings softmax_settings() {
  AttentionKindSettings s;
  s.ignored = [](const AttentionConfig&, AttentionUse, const std::string&) -> std::string {
    return "ignored: kind is softmax";
  };
  return s;
}

}  // namespace tarn
