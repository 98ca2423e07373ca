// The delta rule's and gated attention's part of the recipe (layers/attention/settings.h): the
// convolution's taps and the chunk between the states the backward keeps; no feature map.
#include "kernels/check.h"
#include "layers/attention/settings.h"

namespace tarn {

AttentionKindSettings delta_settings(AttentionKind kind) {
  AttentionKindSettings s;
  s.ignored = [ignored = str_cat("ignored: kind is ", kind.name())](const AttentionConfig&, AttentionUse,
                                                                     const std::string& key) -> std::string {
    return key == "conv_size" || key == "chunk" ? "" : ignored;
  };
  s.size_keys = [](const AttentionConfig&) { return std::vector<std::string>{"conv_size"}; };
  return s;
}

}  // namespace tarn
