#pragma once
// AdamWState in the flat form a safetensors file holds, and back: checkpoints save it beside
// model.safetensors (e.g. as optimizer.safetensors) and restore it exactly.
//   tensors   "<param>.exp_avg", "<param>.exp_avg_sq"     (f32, the parameter's shape)
//   metadata  "optimizer" = "adamw", "step_count" = "<n>", "step.<param>" = "<k>"
#include <string_view>

#include "framework/io/safetensors.h"
#include "framework/optim/adamw.h"

namespace tarn {

struct FlatOptimizerState {
  TensorList tensors;
  SafetensorsMetadata metadata;
};

FlatOptimizerState flatten_adamw_state(const AdamWState& state);

// The inverse; throws naming the missing or malformed key, with `source` (a file name) in the
// message. The result still has to pass AdamW::load_state's checks against the model.
AdamWState unflatten_adamw_state(const TensorList& tensors, const SafetensorsMetadata& metadata,
                                 std::string_view source = "the optimizer state");

}  // namespace tarn
