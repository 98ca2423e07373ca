#pragma once
// A trained model ready for inference, from a checkpoint or run folder: what `tarn eval`,
// `generate` and `denoise` start from (and the tests that decode).
#include <memory>
#include <optional>
#include <string>

#include "app/recipe/recipe.h"
#include "data/tokenizer.h"
#include "framework/io/checkpoint_dir.h"
#include "layers/bart.h"

namespace tarn::app {

struct TrainedModel {
  Recipe recipe;  // the checkpoint's own
  std::optional<Tokenizer> tok;
  std::unique_ptr<BartForConditionalGeneration> model;  // in eval mode
  Checkpoint ckpt;
};

// Opens `dir` (a checkpoint folder, or a run folder: its newest valid checkpoint), applies the
// recipe's thread count, and loads the weights onto the recipe's training.device when this
// machine has it, else the CPU (with a warning: a checkpoint trained on a GPU runs anywhere).
TrainedModel load_trained_model(const std::string& dir);

}  // namespace tarn::app
