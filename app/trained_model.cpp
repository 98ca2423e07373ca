#include "app/trained_model.h"

#include "framework/config/config_error.h"
#include "framework/log/log.h"
#include "app/checkpoint_state.h"
#include "app/session.h"

namespace tarn::app {
namespace {

// The checkpoint recipe's training.device when this machine has it; else the CPU, with a
// warning (a checkpoint trained on a GPU still evaluates anywhere).
Device evaluation_device(const Recipe& recipe) {
  try {
    return training_device(recipe);
  } catch (const ConfigError& e) {
    log::warn("tarn", std::string("running on the CPU instead: ") + e.what());
    return Device::cpu();
  }
}

}  // namespace

TrainedModel load_trained_model(const std::string& dir) {
  TrainedModel l;
  l.ckpt = open_checkpoint_or_run(dir);
  l.recipe = checkpoint_recipe(l.ckpt);
  configure_threads(l.recipe);
  l.tok = Tokenizer::load(l.recipe.data.tokenizer.model);
  l.model = std::make_unique<BartForConditionalGeneration>(model_config(l.recipe, l.tok->vocab_size()));
  load_model_weights(l.ckpt, *l.model);
  l.model->to(evaluation_device(l.recipe));
  l.model->eval();
  log::info("tarn", "loaded ", l.ckpt.dir, " (", l.model->config().str(), ")");
  return l;
}

}  // namespace tarn::app
