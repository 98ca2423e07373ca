#pragma once
// tarn's training recipe: a plain struct, filled from a YAML file plus `--set key=value`
// overrides through the schema declared in recipe.cpp (framework/config/schema.h), and
// validated entirely before any work starts. Field names are generic: the trainer (tools/)
// maps Recipe.model onto the model's own config and the other sections onto the data layer,
// the optimizer and the training loop.
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
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/attention_config.h"
#include "framework/config/config_error.h"

namespace tarn {

namespace config {
class Schema;
}

// One stack's attention, parsed straight into the type the model and the kernels read
// (framework/attention_config.h), and optionally chosen per layer: `layers` holds one entry per
// layer of the stack as given (a kind name, or a map of settings that override the stack's),
// `per_layer` what they resolve to once every source is applied (empty without `layers`).
struct AttentionStackRecipe : AttentionConfig {
  std::vector<YamlEntry> layers;
  std::vector<AttentionConfig> per_layer;
};

// A recipe's stacks are linear attention unless it says otherwise.
struct AttentionStacksRecipe {
  AttentionStackRecipe encoder_self{AttentionConfig::linear_attention(), {}, {}};
  AttentionStackRecipe decoder_self{AttentionConfig::linear_attention(), {}, {}};  // always causal
  AttentionStackRecipe cross{AttentionConfig::linear_attention(), {}, {}};
};

struct ModelRecipe {
  std::string preset = "small";  // tiny | small | base | custom
  int64_t vocab_size = 0;        // 0 = the tokenizer's vocabulary size
  // Sizes: the defaults below are the `small` preset; load_recipe fills them from the preset.
  int64_t d_model = 256;
  int64_t encoder_layers = 4;
  int64_t decoder_layers = 4;
  int64_t heads = 4;  // attention heads of every stack
  int64_t ffn_dim = 1024;
  int64_t max_positions = 512;
  double dropout = 0.1;
  double attention_dropout = 0.0;
  double activation_dropout = 0.0;
  bool scale_embedding = false;
  double init_std = 0.02;
  std::string init_from;  // a checkpoint or run folder: a new run's first weights (app/init_from.h)
  AttentionStacksRecipe attention;
};

struct TokenizerTrainRecipe {
  int64_t vocab_size = 8000;
  int64_t input_sentence_size = 0;  // lines sampled for training; 0 = every line
  double character_coverage = 1.0;
  std::string model_prefix;          // writes <prefix>.model / .vocab; "" is resolved at load
  std::string model_type = "unigram";  // unigram | bpe | char | word
  bool hard_vocab_limit = true;      // false: vocab_size is an upper bound (tiny corpora)
};

struct TokenizerRecipe {
  std::string model;  // an existing SentencePiece .model or byte-level BPE tokenizer.json; "" = train one
  TokenizerTrainRecipe train;
};

struct NoisingRecipe {
  double mask_ratio = 0.3;
  double poisson_lambda = 3.0;
  bool permute_sentences = true;
  double delete_ratio = 0.0;
};

struct DataRecipe {
  std::string kind = "denoising";  // denoising | pairs
  std::string train;               // required
  std::string valid;               // "" = no validation
  std::string test;                // "" = none
  TokenizerRecipe tokenizer;
  int64_t max_source_len = 128;  // tokens, </s> included
  int64_t max_target_len = 128;
  int64_t pack_tokens = 0;  // denoising: join consecutive lines up to this many tokens; 0 = no packing
  bool bos = false;  // each side starts with <s> (HF BART's tokenizer); generation forces <s> first
  NoisingRecipe noising;
};

struct OptimizerRecipe {
  std::string name = "adamw";
  double lr = 5e-4;
  std::array<double, 2> betas{0.9, 0.98};
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t warmup_steps = 500;
  std::string schedule = "inverse_sqrt";  // constant | linear | cosine | inverse_sqrt
  double min_lr = 0.0;
  double clip_norm = 1.0;  // 0 = no clipping
};

struct TrainingRecipe {
  int64_t tokens_per_batch = 4096;
  int64_t grad_accumulation = 1;
  int64_t max_steps = 10000;     // 0 = no limit
  int64_t max_epochs = 0;        // 0 = no limit
  double max_time_minutes = 0;   // 0 = no limit
  int64_t seed = 1;
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string precision = "f32";  // f32 | bf16 (framework/precision.h)
  int64_t threads = 0;         // 0 = every core
  double label_smoothing = 0.1;
  int64_t max_bad_steps = 5;  // non-finite losses in a row before stopping
  // Data-parallel runs (mpirun): a collective not done in this time ends the job.
  double collective_timeout_s = 300;
  int64_t check_replicas_every_steps = 200;  // parameter checksum across ranks; 0 = at start only
  bool shard_optimizer = false;              // ZeRO-1: AdamW moments split across the ranks
  bool overlap_communication = true;         // all-reduce gradient buckets during the backward
  double gradient_bucket_mb = 32;            // gradients per all-reduce call
};

struct ValidationRecipe {
  int64_t every_steps = 500;  // 0 = only at the end
  int64_t max_batches = 0;    // 0 = the whole validation set
  int64_t early_stopping_patience = 0;  // validations without improvement before stopping; 0 = off
};

struct CheckpointRecipe {
  std::string dir = "runs/{recipe}";
  int64_t every_steps = 1000;  // 0 = only at the end
  int64_t keep_last = 3;       // 0 = keep every checkpoint
  bool keep_best = true;       // also keep the one with the best validation loss
};

// Attention transfer before training (app/linearize.h): only the parameters the new attention
// kinds add are trained to match softmax attention's output, layer by layer.
struct LinearizeRecipe {
  int64_t steps = 0;  // 0 = no such stage
  double lr = 1e-3;
};

struct LoggingRecipe {
  int64_t every_steps = 50;
  std::string metrics_file;     // JSON lines; "" is resolved to <checkpoints.dir>/metrics.jsonl
  std::string tensorboard;      // event files' folder; "" is resolved to <checkpoints.dir>; "off": none
  std::string color = "auto";   // auto | always | never
};

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
