#pragma once
// AdamWState in the flat form a safetensors file holds, and back: checkpoints save it beside
// model.safetensors (as optimizer.safetensors) and restore it exactly. The layout is the one
// app/checkpoint_state.cpp writes:
//   tensors   "exp_avg.<param>", "exp_avg_sq.<param>"      (f32, the parameter's shape)
//   metadata  "step_count" = "<n>", "step.<param>" = "<k>", and "optimizer" = "adamw"
//             (optional when reading; when present it must say adamw)
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
