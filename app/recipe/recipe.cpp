#include "app/recipe/recipe.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "framework/config/schema.h"

namespace tarn {
namespace {

using config::Loader;
using namespace recipe_sections;

constexpr const char* kRecipePlaceholder = "{recipe}";

// The sections in schema order (the order of to_yaml, help and resume reports).
config::Schema build_schema() {
  config::Schema schema("tarn recipe");
  auto root = schema.root<Recipe>();
  declare_model(root.section(&Recipe::model, "model", "the encoder-decoder (BART layout)"));
  declare_data(root.section(&Recipe::data, "data", "corpora, tokenizer, lengths and noise"));
  declare_optimizer(root.section(&Recipe::optimizer, "optimizer", "the optimizer and its learning-rate schedule"));
  declare_training(root.section(&Recipe::training, "training", "batches, stopping, device"));
  declare_validation(root.section(&Recipe::validation, "validation", "periodic validation on data.valid"));
  declare_checkpoints(root.section(&Recipe::checkpoints, "checkpoints", "where and how often to save"));
  declare_logging(root.section(&Recipe::logging, "logging", "progress lines and metrics"));
  declare_linearize(root.section(&Recipe::linearize, "linearize",
                                "attention transfer before training a new run (model.init_from a softmax model): "
                                "only the new attention parameters train, to match softmax attention layer by layer"));
  return schema;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// Resolution (see recipe.h): presets and per-layer attention, "{recipe}", derived paths.
void resolve(Recipe& r, Loader& loader, const std::string& source) {
  resolve_model(r.model, loader);
  const std::string stem = std::filesystem::path(source).stem().string();
  for (std::string* path : {&r.data.train, &r.data.valid, &r.data.test, &r.data.tokenizer.model,
                            &r.data.tokenizer.train.model_prefix, &r.checkpoints.dir, &r.logging.metrics_file,
                            &r.logging.tensorboard}) {
    *path = replace_all(*path, kRecipePlaceholder, stem);
  }
  if (r.logging.metrics_file.empty()) {
    r.logging.metrics_file = (std::filesystem::path(r.checkpoints.dir) / "metrics.jsonl").string();
  }
  if (r.logging.tensorboard.empty()) r.logging.tensorboard = r.checkpoints.dir;
  TokenizerTrainRecipe& tok = r.data.tokenizer.train;
  if (r.data.tokenizer.model.empty() && tok.model_prefix.empty()) {
    const std::filesystem::path folder = std::filesystem::path(r.data.train).parent_path();
    tok.model_prefix = (folder / ("spm" + std::to_string(tok.vocab_size))).string();
  }
}

// Rules that involve more than one field; run once every field is valid on its own. Errors
// come in this order (the first is what a malformed recipe's test expects), warnings likewise.
void check_cross_field(const Recipe& r, Loader& loader) {
  check_model_sizes(r.model, loader);
  check_data(r, loader);
  check_run(r, loader);
  check_attention(r.model, loader);
  warn_unused_data(r.data, loader);
  warn_unused_validation(r, loader);
}

Recipe finish(Recipe r, Loader& loader, const std::string& source, bool parsed) {
  if (parsed) loader.check_required();
  loader.throw_if_errors();
  resolve(r, loader, source);
  loader.throw_if_errors();
  check_cross_field(r, loader);
  loader.throw_if_errors();
  r.source = source;
  r.origins = loader.origins();
  for (const ConfigIssue& w : loader.warnings()) r.warnings.push_back(w.str());
  return r;
}

}  // namespace

ConfigOrigin Recipe::where(const std::string& key) const {
  if (const ConfigOrigin* at = nearest_origin(origins, key)) return *at;
  return {source, 0};
}

const config::Schema& recipe_schema() {
  // Rebuilt when a program registers an attention kind (its name becomes a `kind` choice). The
  // schemas built before stay alive: a loader may still hold one.
  static std::mutex mutex;
  static std::vector<std::unique_ptr<const config::Schema>> built;
  static size_t kinds = 0;
  std::lock_guard<std::mutex> lock(mutex);
  const size_t now = AttentionKind::all().size();
  if (built.empty() || kinds != now) {
    kinds = now;
    built.push_back(std::make_unique<const config::Schema>(build_schema()));
  }
  return *built.back();
}

bool operator==(const Recipe& a, const Recipe& b) { return recipe_schema().equal(a, b); }

std::string first_difference(const Recipe& a, const Recipe& b) { return recipe_schema().first_difference(a, b); }

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  Recipe r;
  Loader loader(recipe_schema(), &r);
  const bool parsed = loader.apply_file(path);
  for (const std::string& o : overrides) loader.apply_override(o);
  return finish(std::move(r), loader, path, parsed);
}

Recipe parse_recipe(const std::string& yaml_text, const std::string& source, const std::vector<std::string>& overrides) {
  Recipe r;
  Loader loader(recipe_schema(), &r);
  const bool parsed = loader.apply_text(yaml_text, source);
  for (const std::string& o : overrides) loader.apply_override(o);
  return finish(std::move(r), loader, source, parsed);
}

std::string to_yaml(const Recipe& recipe) {
  return recipe_schema().to_yaml(recipe, [&](const config::Field& f) {
    return f.path == "data.tokenizer.train" && !recipe.data.tokenizer.model.empty();
  });
}

std::string recipe_help() {
  return recipe_schema().describe() +
         "# Override any key on the command line: --set optimizer.lr=3e-4 --set optimizer.betas=[0.9,0.98]\n"
         "# Relative paths are relative to the working directory; {recipe} is the recipe file's name.\n";
}

void check_recipe_files(const Recipe& recipe) {
  std::vector<ConfigIssue> issues;
  const std::string cwd = std::filesystem::current_path().string();
  auto check = [&](const std::string& key, const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return;
    std::string message = "expected an existing file, got " + quoted(path);
    if (std::filesystem::path(path).is_relative()) message += " (relative to the working directory " + cwd + ")";
    issues.push_back({recipe.where(key), key, message});
  };
  check("data.train", recipe.data.train);
  check("data.valid", recipe.data.valid);
  check("data.test", recipe.data.test);
  check("data.tokenizer.model", recipe.data.tokenizer.model);
  if (!issues.empty()) throw ConfigError(std::move(issues));
}

}  // namespace tarn
