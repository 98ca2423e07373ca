#include "app/checkpoint_state.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>

#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "framework/io/safetensors.h"
#include "framework/io/state_dict.h"
#include "framework/optim/adamw_state_io.h"

namespace tarn::app {
namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kProgressFile = "progress.json";
constexpr const char* kRecipeFile = "recipe.yaml";
constexpr const char* kTokenizerFile = "tokenizer.model";

}  // namespace

void save_training_checkpoint(const std::string& run_dir, const Recipe& recipe, const Tokenizer& tokenizer,
                              const BartForConditionalGeneration& model, const AdamW& optimizer,
                              const Progress& progress) {
  save_training_checkpoint(run_dir, recipe, tokenizer, model, optimizer.state_view(), progress);
}

void save_training_checkpoint(const std::string& run_dir, const Recipe& recipe, const Tokenizer& tokenizer,
                              const BartForConditionalGeneration& model, const AdamWState& optimizer_state,
                              const Progress& progress) {
  std::filesystem::create_directories(run_dir);
  CheckpointWriter w(checkpoint_dir(run_dir, progress.step));
  w.write_safetensors(kModelFile, state_dict(model), {{"format", "pt"}});

  // The moments may alias the live optimizer (state_view): written before the next step().
  const FlatOptimizerState opt = flatten_adamw_state(optimizer_state);
  w.write_safetensors(kOptimizerFile, opt.tensors, opt.metadata);
  w.write_file(kProgressFile, json::dump(progress_json(progress), 2) + "\n");
  w.write_file(kRecipeFile, to_yaml(recipe));
  w.write_file(kTokenizerFile, read_file(tokenizer.path()));
  w.set_info("step", std::to_string(progress.step));
  if (progress.has_best) w.set_info("best_val_nll", std::to_string(progress.best_val_nll));
  w.commit();
}

void load_training_checkpoint(const Checkpoint& ckpt, BartForConditionalGeneration& model, AdamW& optimizer,
                              Progress& progress) {
  optimizer.load_state(load_training_checkpoint(ckpt, model, progress));
}

AdamWState load_training_checkpoint(const Checkpoint& ckpt, BartForConditionalGeneration& model, Progress& progress) {
  load_model_weights(ckpt, model);
  const std::string opt_path = ckpt.path(kOptimizerFile);
  const SafetensorsFile f = load_safetensors(opt_path);
  AdamWState state = unflatten_adamw_state(f.tensors, f.metadata, opt_path);
  progress = checkpoint_progress(ckpt);
  model.set_dropout_state(progress.dropout);
  restore_favor_state(progress, model);
  return state;
}

void capture_favor_state(BartForConditionalGeneration& model, Progress& progress) {
  progress.favor.clear();
  for (auto& [name, f] : model.favor_projections()) progress.favor[name] = {f->rng, f->steps};
}

void restore_favor_state(const Progress& progress, BartForConditionalGeneration& model) {
  auto projections = model.favor_projections();
  TARN_CHECK(projections.size() == progress.favor.size(), "checkpoint: ", progress.favor.size(),
             " FAVOR+ projection states for a model with ", projections.size());
  for (auto& [name, f] : projections) {
    auto it = progress.favor.find(name);
    TARN_CHECK(it != progress.favor.end(), "checkpoint: no FAVOR+ state for ", name);
    f->rng = it->second.rng;
    f->steps = it->second.steps;
  }
}

Progress checkpoint_progress(const Checkpoint& ckpt) {
  const std::string path = ckpt.path(kProgressFile);
  return parse_progress(read_file(path), path);
}

Recipe checkpoint_recipe(const Checkpoint& ckpt) {
  const std::string path = ckpt.path(kRecipeFile);
  Recipe r = parse_recipe(read_file(path), path);
  r.data.tokenizer.model = ckpt.path(kTokenizerFile);
  return r;
}

void load_model_weights(const Checkpoint& ckpt, BartForConditionalGeneration& model) {
  const std::string path = ckpt.path(kModelFile);
  const SafetensorsFile f = load_safetensors(path);
  // Valid CRCs over NaN weights: the run that wrote them had diverged. Nothing useful comes of
  // evaluating, exporting or continuing them, so they are refused by name.
  for (const auto& [name, t] : f.tensors) {
    if (t.dtype() != DType::f32) continue;
    const float* v = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i)
      TARN_CHECK(std::isfinite(v[i]), path, ": tensor ", name, " holds a non-finite value (", v[i], " at index ", i,
                 "): the run that wrote this checkpoint had diverged; use an earlier checkpoint");
  }
  load_state_dict(model, f.tensors, true, path);
}

Checkpoint open_checkpoint_or_run(const std::string& path) {
  struct stat st {};
  TARN_CHECK(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "checkpoint ", path, ": no such folder");
  if (::stat((path + "/" + kCompleteFile).c_str(), &st) == 0) return open_checkpoint(path);
  std::vector<std::string> rejected;
  auto latest = latest_valid_checkpoint(path, &rejected);
  std::string why;
  for (const std::string& r : rejected) why += "\n  " + r;
  TARN_CHECK(latest, "checkpoint ", path, ": neither a checkpoint (no ", kCompleteFile,
             ") nor a run folder holding a valid one", why);
  return *latest;
}

}  // namespace tarn::app
