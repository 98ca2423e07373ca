#pragma once
// What may change when a run resumes from a checkpoint, and the check that refuses the rest
// (recipes/README.md, "Resuming"; docs/design.md section 8). A checkpoint holds the recipe it
// was written with (recipe.yaml, every default filled in); before any weight is loaded, `tarn
// train` compares that recipe's model with the resuming recipe's:
//   - every key under `model` is compared, found through the recipe's schema, so a key added
//     later is compared too; only the few in model_keys_that_may_change() may differ;
//   - attention chosen per layer is compared layer by layer as resolved (`layers: [delta,
//     delta]` and `kind: delta` are the same model), and differences are named per layer
//     (model.attention.encoder_self.layers[1].kind);
//   - model.vocab_size 0 stands for the tokenizer's size on both sides;
//   - the other sections (data, optimizer, training, validation, checkpoints, logging) may
//     change: they say how to train, not what the model computes. The tokenizer is the
//     exception: its vocabulary gives the ids their meaning, so it is compared piece by piece.
#include <cstdint>
#include <string>
#include <vector>

#include "app/recipe/recipe.h"
#include "data/tokenizer.h"
#include "framework/config/config_error.h"
#include "framework/io/checkpoint_dir.h"

namespace tarn::app {

// A model key that may differ between a checkpoint and the recipe resuming it, and why.
struct ResumableModelKey {
  const char* key;  // dotted; "*" stands for one section name (any attention stack)
  const char* why;
};
// The one list of them (app/resume_check.cpp).
const std::vector<ResumableModelKey>& model_keys_that_may_change();
// Whether the model key `key` may change on resume; a per-layer key
// (model.attention.cross.layers[1].chunk) as its stack's (model.attention.cross.chunk).
bool model_key_may_change(const std::string& key);

// A key whose value differs: the checkpoint recipe's and the resuming recipe's, as YAML.
struct SettingChange {
  std::string key;
  std::string checkpoint, recipe;
};
struct ResumeComparison {
  std::vector<SettingChange> refused;  // model keys: they change what the model computes
  std::vector<SettingChange> allowed;  // every other difference, in schema order
};

// Compares the recipe a checkpoint was written with and the recipe resuming it.
// `tokenizer_vocab` stands for model.vocab_size 0 on both sides.
ResumeComparison compare_for_resume(const Recipe& checkpoint, const Recipe& recipe, int64_t tokenizer_vocab);

// The recipe's model is not the checkpoint's: resuming is refused (a ConfigError: exit 2).
class ResumeRefused : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// Run before resuming `recipe` from `ckpt` with `tokenizer` (the run's): throws ResumeRefused
// listing every model key that differs, each at the recipe's line that set it with the
// checkpoint's and the recipe's values, and a tokenizer whose vocabulary differs, then says how
// to go on; also when the checkpoint's recipe cannot be read. Logs the changes it allows.
void check_resume(const Checkpoint& ckpt, const Recipe& recipe, const Tokenizer& tokenizer);

}  // namespace tarn::app
