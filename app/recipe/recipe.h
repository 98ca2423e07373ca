#pragma once
// tarn's training recipe: a plain struct, filled from a YAML file plus `--set key=value`
// overrides through the schema engine (framework/config/schema.h), and validated entirely
// before any work starts. Each section declares its own keys and rules: the model and its
// attention (model_recipe.h, attention_recipe.h), the data (data_recipe.h), and the run's
// optimizer, training loop, validation, checkpoints, logging and linearize stage
// (run_recipe.h); this file puts them together. app/session.h maps Recipe.model onto the
// model's own config and the other sections onto the data layer, the optimizer and the
// training loop.
//
//   Recipe r = load_recipe("recipes/small-linear.yaml", {"optimizer.lr=3e-4"});
//   for (const std::string& w : r.warnings) log(w);
//   check_recipe_files(r);           // data and tokenizer files exist (ConfigError if not)
//   std::string resolved = to_yaml(r);  // every default filled in; loads back to an equal Recipe
//
// Errors are ConfigError (exit code 2 in the CLI), one line per problem:
//   recipes/small-linear.yaml:14: optimizer.lr: expected a positive number, got "fast"
//   --set training.max_steps: expected a non-negative integer, got -5
//
// Resolution rules applied at load time (so that to_yaml shows the values actually used):
//   - model sizes (d_model, encoder_layers, decoder_layers, heads, ffn_dim, max_positions) not
//     given come from model.preset; with preset `custom` every one of them must be given;
//   - "{recipe}" in a path is replaced by the recipe file's name without folder or extension;
//   - logging.metrics_file "" becomes <checkpoints.dir>/metrics.jsonl;
//   - logging.tensorboard "" becomes <checkpoints.dir> ("off" stays: no event files);
//   - data.tokenizer.train.model_prefix "" becomes <folder of data.train>/spm<vocab_size>.
// Relative paths are kept as written: they are relative to the working directory (see
// recipes/README.md), not to the recipe file.
//
// To add a key: the member, with its default, goes in its section's struct (*_recipe.h); its
// declaration, with a description and a range, in the section's declare_* (*_recipe.cpp); a
// rule that involves another key in the section's check_* (called, in order, from
// check_cross_field in recipe.cpp). Help output, to_yaml, the round trip and equality pick it
// up by themselves; tests/recipe checks that every key has a description.
#include <map>
#include <string>
#include <vector>

#include "app/recipe/data_recipe.h"
#include "app/recipe/model_recipe.h"
#include "app/recipe/run_recipe.h"
#include "framework/config/config_error.h"

namespace tarn {

struct Recipe {
  ModelRecipe model;
  DataRecipe data;
  OptimizerRecipe optimizer;
  TrainingRecipe training;
  ValidationRecipe validation;
  CheckpointRecipe checkpoints;
  LoggingRecipe logging;
  LinearizeRecipe linearize;

  // Not part of the recipe's identity (operator== and to_yaml ignore them):
  std::string source;                // the recipe file as named, or the name given to parse_recipe
  std::vector<std::string> warnings;  // "file:line: key: message", e.g. the identity feature map
  std::map<std::string, ConfigOrigin> origins;  // key path -> where it was set (file line or --set)

  // Where `key` was set, else its nearest section that was, else the recipe file (no line).
  ConfigOrigin where(const std::string& key) const;
};

// Every schema field equal (exact for numbers); source, warnings and origins are ignored.
bool operator==(const Recipe& a, const Recipe& b);
inline bool operator!=(const Recipe& a, const Recipe& b) { return !(a == b); }
// The first key whose values differ ("" when equal), for test messages.
std::string first_difference(const Recipe& a, const Recipe& b);

// The recipe schema (for help output and generic tooling).
const config::Schema& recipe_schema();

// Reads `path` and applies `overrides` ("optimizer.lr=3e-4", in order, later wins); throws
// ConfigError listing every problem found (YAML syntax, unknown keys, types, ranges, missing
// values, cross-field rules). Touches no file but the recipe.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text; `source` names it in messages and gives "{recipe}" its value.
Recipe parse_recipe(const std::string& yaml_text, const std::string& source = "recipe.yaml",
                    const std::vector<std::string>& overrides = {});

// The resolved recipe as YAML, every default filled in: parse_recipe(to_yaml(r)) == r.
// data.tokenizer.train is left out when data.tokenizer.model is set.
std::string to_yaml(const Recipe& recipe);

// Every key with its default, description and accepted values, as annotated YAML (--help).
std::string recipe_help();

// Checks that the files the recipe reads exist (data.train, and data.valid, data.test and
// data.tokenizer.model when set), relative to the working directory; throws ConfigError naming
// each missing one at the line that set it. The trainer calls this before any work.
void check_recipe_files(const Recipe& recipe);

}  // namespace tarn
