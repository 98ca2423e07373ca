#pragma once
// What a training checkpoint holds and how it is written and read back. A checkpoint folder
// (framework/io/checkpoint_dir.h: atomic, verified) contains
//   model.safetensors      weights and buffers under HuggingFace BART names
//   optimizer.safetensors  AdamW moments ("exp_avg.<name>", "exp_avg_sq.<name>"); per-parameter
//                          step counts and the optimizer's step count in __metadata__
//   progress.json          step, data position, dropout stream, best validation, counters
//   recipe.yaml            the resolved recipe, every default filled in
//   tokenizer.model        the SentencePiece model the ids refer to
// Everything the next step depends on is in there, so a resumed run continues bit for bit.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/tokenizer.h"
#include "framework/io/checkpoint_dir.h"
#include "framework/optim/adamw.h"
#include "layers/bart.h"
#include "app/progress.h"
#include "app/recipe/recipe.h"

namespace tarn::app {

// The model's FAVOR+ redraw state into / out of a Progress.
void capture_favor_state(BartForConditionalGeneration& model, Progress& progress);
void restore_favor_state(const Progress& progress, BartForConditionalGeneration& model);

void save_training_checkpoint(const std::string& run_dir, const Recipe& recipe, const Tokenizer& tokenizer,
                              const BartForConditionalGeneration& model, const AdamW& optimizer,
                              const Progress& progress);
// The same from an optimizer state (ZeRO-1's gathered state, framework/distributed/sharded_adamw.h).
void save_training_checkpoint(const std::string& run_dir, const Recipe& recipe, const Tokenizer& tokenizer,
                              const BartForConditionalGeneration& model, const AdamWState& optimizer_state,
                              const Progress& progress);

// Copies the checkpoint's weights, optimizer state and progress into live objects of the same
// recipe; names and shapes are checked first (a clear error names the first mismatch).
void load_training_checkpoint(const Checkpoint& ckpt, BartForConditionalGeneration& model, AdamW& optimizer,
                              Progress& progress);
// The same without an AdamW: the weights and progress restored, the optimizer state returned.
AdamWState load_training_checkpoint(const Checkpoint& ckpt, BartForConditionalGeneration& model, Progress& progress);

// For eval / export / generate: the checkpoint's recipe (its tokenizer pointed at the copy in
// the checkpoint) and its model.
Recipe checkpoint_recipe(const Checkpoint& ckpt);
void load_model_weights(const Checkpoint& ckpt, BartForConditionalGeneration& model);
Progress checkpoint_progress(const Checkpoint& ckpt);

// A checkpoint folder, or a run folder (its newest valid checkpoint), opened and verified.
Checkpoint open_checkpoint_or_run(const std::string& path);

}  // namespace tarn::app
