#include "app/init_from.h"

#include <map>

#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/log/log.h"
#include "app/checkpoint_state.h"

namespace tarn::app {

InitFromReport init_from_checkpoint(const std::string& dir, const Tokenizer& tokenizer,
                                    BartForConditionalGeneration& model) {
  const Checkpoint ckpt = open_checkpoint_or_run(dir);
  InitFromReport r;
  r.checkpoint = ckpt.dir;

  // The ids must mean the same tokens, or the embedding rows would be another word's.
  const Tokenizer theirs = Tokenizer::load(checkpoint_recipe(ckpt).data.tokenizer.model);
  TARN_CHECK(theirs.vocab_size() == tokenizer.vocab_size(), ckpt.dir, ": its tokenizer has ",
             theirs.vocab_size(), " pieces, this run's (", tokenizer.path(), ") ", tokenizer.vocab_size(),
             ": use the checkpoint's tokenizer (data.tokenizer.model)");
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string a = theirs.id_to_piece(id), b = tokenizer.id_to_piece(id);
    TARN_CHECK(a == b, ckpt.dir, ": id ", id, " is \"", a, "\" in its tokenizer and \"", b,
               "\" in this run's (", tokenizer.path(), "): use the checkpoint's tokenizer (data.tokenizer.model)");
  }

  const std::string path = ckpt.path("model.safetensors");
  const SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : state_dict(model)) mine.emplace(name, t);
  TensorList load;
  std::string mismatches;
  for (const auto& [name, t] : f.tensors) {
    auto it = mine.find(name);
    if (it == mine.end()) {
      r.dropped.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      mismatches += str_cat("\n  ", name, ": ", t.shape().str(), " there, ", it->second.shape().str(), " here");
    } else {
      load.emplace_back(name, t);
      r.loaded.push_back(name);
      r.loaded_values += t.numel();
    }
  }
  TARN_CHECK(mismatches.empty(), ckpt.dir,
             ": tensors whose shape differs (a size of the model changed; only tensors the new model adds or "
             "drops may differ):",
             mismatches);
  for (const auto& [name, t] : mine)
    if (!f.find(name)) r.fresh.push_back(name);
  load_state_dict(model, load, /*strict=*/false, path);
  return r;
}

void log_init_from(const InitFromReport& r) {
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return s.empty() ? std::string("none") : s;
  };
  log::info("init", "model.init_from ", r.checkpoint, ": loaded ", r.loaded.size(), " tensors (",
            log::thousands(r.loaded_values), " values), ", r.fresh.size(), " new, ", r.dropped.size(), " dropped");
  log::info("init", "new (initialised as the recipe says): ", list(r.fresh));
  log::info("init", "dropped (not in this model): ", list(r.dropped));
}

}  // namespace tarn::app
