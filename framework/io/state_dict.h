#pragma once
// A module's tensors by name, for checkpoints and export, and loading them back in place.
#include <string>
#include <string_view>
#include <vector>

#include "framework/io/safetensors.h"
#include "framework/module.h"

namespace tarn {

// Parameters (registration order), then buffers, under their HF-style names. The tensors alias
// the module's storage (no copy, no autograd history): save them before the next optimizer step.
TensorList state_dict(const Module& module);

struct StateDictLoadResult {
  std::vector<std::string> missing;     // in the module, not in the tensors (non-strict only)
  std::vector<std::string> unexpected;  // in the tensors, not in the module (non-strict only)
};

// Copies values into the module's existing tensors, in place: the Tensor objects (and anything
// holding them, such as an optimizer) stay the same; device and dtype stay the module's, values
// are converted between F32, BF16 and F16 when the dtypes differ. Everything is checked before
// anything is copied, so a failed load leaves the module unchanged. Errors name the tensor and
// both shapes; with `strict`, missing and unexpected names are errors too (all listed).
// `source` names the tensors' origin in messages (e.g. "runs/x/step_1200/model.safetensors").
StateDictLoadResult load_state_dict(Module& module, const TensorList& tensors, bool strict = true,
                                    std::string_view source = "the state dict");

}  // namespace tarn
