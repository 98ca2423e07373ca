#include "tools/tarn/checkpoint_state.h"

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

json::Value progress_json(const Progress& p) {
  using json::Value;
  Value o = Value::object();
  o.set("step", Value::number(p.step));
  o.set("data_epoch", Value::number(p.data.epoch));
  o.set("data_batch", Value::number(p.data.batch));
  o.set("dropout_seed", Value::number(p.dropout.seed));
  o.set("dropout_counter", Value::number(p.dropout.counter));
  if (!p.rank_dropout.empty()) {
    std::vector<Value> ranks;
    for (const DropoutState& d : p.rank_dropout) {
      Value e = Value::object();
      e.set("seed", Value::number(d.seed));
      e.set("counter", Value::number(d.counter));
      ranks.push_back(e);
    }
    o.set("rank_dropout", Value::array(std::move(ranks)));
  }
  o.set("tokens_seen", Value::number(p.tokens_seen));
  o.set("elapsed_s", Value::number(p.elapsed_s));
  o.set("best_val_nll", p.has_best ? Value::number(p.best_val_nll) : Value());
  o.set("best_step", Value::number(p.best_step));
  o.set("evals_without_improvement", Value::number(p.evals_without_improvement));
  o.set("bad_steps_in_row", Value::number(p.bad_steps_in_row));
  o.set("skipped_steps", Value::number(p.skipped_steps));
  Value favor = Value::object();
  for (const auto& [name, f] : p.favor) {
    Value e = Value::object();
    e.set("seed", Value::number(f.rng.seed));
    e.set("stream", Value::number(f.rng.stream));
    e.set("offset", Value::number(f.rng.offset));
    e.set("steps", Value::number(f.steps));
    favor.set(name, e);
  }
  o.set("favor", favor);
  return o;
}

const json::Value& field(const json::Value& o, const char* key, const std::string& source) {
  const json::Value* v = o.find(key);
  TARN_CHECK(v, source, ": missing \"", key, "\"");
  return *v;
}

Progress parse_progress(const std::string& text, const std::string& source) {
  const json::Value o = json::parse(text, source);
  Progress p;
  p.step = static_cast<int64_t>(field(o, "step", source).as_u64("step"));
  p.data.epoch = field(o, "data_epoch", source).as_u64("data_epoch");
  p.data.batch = field(o, "data_batch", source).as_u64("data_batch");
  p.dropout.seed = field(o, "dropout_seed", source).as_u64("dropout_seed");
  p.dropout.counter = field(o, "dropout_counter", source).as_u64("dropout_counter");
  if (const json::Value* ranks = o.find("rank_dropout"))
    for (const json::Value& e : ranks->items("rank_dropout"))
      p.rank_dropout.push_back({field(e, "seed", source).as_u64("rank_dropout.seed"),
                                field(e, "counter", source).as_u64("rank_dropout.counter")});
  p.tokens_seen = static_cast<int64_t>(field(o, "tokens_seen", source).as_u64("tokens_seen"));
  p.elapsed_s = field(o, "elapsed_s", source).as_double("elapsed_s");
  const json::Value& best = field(o, "best_val_nll", source);
  p.has_best = !best.is_null();
  if (p.has_best) p.best_val_nll = best.as_double("best_val_nll");
  p.best_step = static_cast<int64_t>(field(o, "best_step", source).as_u64("best_step"));
  p.evals_without_improvement =
      static_cast<int64_t>(field(o, "evals_without_improvement", source).as_u64("evals_without_improvement"));
  p.bad_steps_in_row = static_cast<int64_t>(field(o, "bad_steps_in_row", source).as_u64("bad_steps_in_row"));
  p.skipped_steps = static_cast<int64_t>(field(o, "skipped_steps", source).as_u64("skipped_steps"));
  for (const auto& [name, e] : field(o, "favor", source).members("favor")) {
    Progress::Favor& f = p.favor[name];
    f.rng.seed = field(e, "seed", source).as_u64("favor.seed");
    f.rng.stream = field(e, "stream", source).as_u64("favor.stream");
    f.rng.offset = field(e, "offset", source).as_u64("favor.offset");
    f.steps = static_cast<int64_t>(field(e, "steps", source).as_u64("favor.steps"));
  }
  return p;
}

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
  w.write_file(kProgressFile, progress_json(progress).dump(2) + "\n");
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
