#include "app/resume_check.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "framework/config/schema.h"
#include "framework/io/atomic_file.h"
#include "framework/log/log.h"

namespace tarn::app {
namespace {

constexpr const char* kRecipeFile = "recipe.yaml";        // app/checkpoint_state.cpp writes them
constexpr const char* kTokenizerFile = "tokenizer.model";
constexpr size_t kLoggedChanges = 12;

std::vector<std::string> split(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

// model.attention.cross.layers[1].chunk -> model.attention.cross.chunk: a per-layer key as
// its stack's key (the entries take the stack's keys).
std::string stack_key(const std::string& key) {
  std::string out;
  for (const std::string& p : split(key)) {
    if (p.rfind("layers[", 0) == 0) continue;
    out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

bool matches(const std::string& pattern, const std::string& key) {
  const std::vector<std::string> p = split(pattern), k = split(key);
  if (p.size() != k.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != k[i]) return false;
  return true;
}

// The recipe line of a per-layer key is its `layers` list's.
ConfigOrigin origin_of(const Recipe& recipe, const std::string& key) {
  std::string k = key;
  if (const size_t bracket = k.find('['); bracket != std::string::npos) k.resize(bracket);
  return recipe.where(k);
}

// One layer's settings in stack `stack` of `r`: its `layers` entry, else the stack's own.
const AttentionConfig& layer_of(const AttentionStack& stack, size_t i) {
  return stack.per_layer.empty() ? static_cast<const AttentionConfig&>(stack) : stack.per_layer[i];
}

// Where the ids' meanings differ: "" when both tokenizers hold the same pieces in the same order.
std::string vocabulary_difference(const Tokenizer& checkpoint, const Tokenizer& run) {
  if (checkpoint.vocab_size() != run.vocab_size())
    return str_cat("the checkpoint's has ", checkpoint.vocab_size(), " pieces, this one ", run.vocab_size());
  for (int32_t id = 0; id < run.vocab_size(); ++id) {
    const std::string a = checkpoint.id_to_piece(id), b = run.id_to_piece(id);
    if (a != b) return str_cat("id ", id, " is \"", a, "\" in the checkpoint's and \"", b, "\" in this one");
  }
  return "";
}

constexpr const char* kNewRun =
    "start a new run: --restart (this folder's checkpoints move to previous_<time>/) or another checkpoints.dir";

std::string how_to_go_on(const Checkpoint& ckpt) {
  return str_cat("To continue this run, give the recipe the checkpoint's values again (", ckpt.path(kRecipeFile),
                 " holds them); to train this recipe from new weights, ", kNewRun);
}

}  // namespace

const std::vector<ResumableModelKey>& model_keys_that_may_change() {
  static const std::vector<ResumableModelKey> keys = {
      {"model.preset", "names sizes only; the sizes it resolves to are compared"},
      {"model.dropout", "a training-time regulariser: the weights compute the same function (dropout is off in "
                        "evaluation and decoding); changing it changes how the rest of the run trains, as lr does"},
      {"model.attention_dropout", "a training-time regulariser, as model.dropout"},
      {"model.activation_dropout", "a training-time regulariser, as model.dropout"},
      {"model.init_std", "draws the initial weights only, and a resumed run loads its weights"},
      {"model.init_from", "gives the first weights only, and a resumed run loads its weights"},
      {"model.attention.*.align_gate_bias", "starts the gate only, and a resumed run loads its weights"},
      {"model.attention.*.chunk", "blocks the same sums differently (rows per chunk of the CPU scan, tokens between "
                                  "the delta rule's saved states, positions per block of aligned cross-attention): "
                                  "results move by f32 rounding, as between the CPU and CUDA"},
  };
  return keys;
}

bool model_key_may_change(const std::string& key) {
  const std::string k = stack_key(key);
  return std::any_of(model_keys_that_may_change().begin(), model_keys_that_may_change().end(),
                     [&](const ResumableModelKey& m) { return matches(m.key, k); });
}

ResumeComparison compare_for_resume(const Recipe& checkpoint, const Recipe& recipe, int64_t tokenizer_vocab) {
  const config::Schema& schema = recipe_schema();
  Recipe a = checkpoint, b = recipe;
  for (Recipe* r : {&a, &b})
    if (r->model.vocab_size == 0) r->model.vocab_size = tokenizer_vocab;
  ResumeComparison out;
  auto add = [&](const std::string& key, std::string in_checkpoint, std::string in_recipe) {
    const bool model = key.rfind("model.", 0) == 0;
    (model && !model_key_may_change(key) ? out.refused : out.allowed)
        .push_back({key, std::move(in_checkpoint), std::move(in_recipe)});
  };

  // Stacks with attention chosen per layer (on either side): layer by layer, as resolved. Each
  // layer's settings are put in the stack of two otherwise equal recipes and those compared,
  // so every key of a stack is compared without being named here.
  const config::Field* attention = schema.find("model.attention");
  TARN_ASSERT(attention != nullptr, "the recipe schema has no model.attention section");
  for (const auto& section : attention->children) {
    if (section->is_leaf()) continue;
    // Every section of model.attention is an attention stack (app/recipe/attention_recipe.cpp).
    auto* sa = static_cast<AttentionStack*>(section->locate(&a));
    auto* sb = static_cast<AttentionStack*>(section->locate(&b));
    if (sa->per_layer.empty() && sb->per_layer.empty()) continue;  // compared below, key by key
    // A layer count that differs is model.encoder_layers or decoder_layers, reported below.
    const size_t layers = sa->per_layer.empty()   ? sb->per_layer.size()
                          : sb->per_layer.empty() ? sa->per_layer.size()
                                                  : std::min(sa->per_layer.size(), sb->per_layer.size());
    for (size_t i = 0; i < layers; ++i) {
      Recipe la = a, lb = a;
      *static_cast<AttentionStack*>(section->locate(&la)) = layer_of(*sa, i);
      *static_cast<AttentionStack*>(section->locate(&lb)) = layer_of(*sb, i);
      for (const config::Field* f : schema.differences(la, lb))
        add(str_cat(section->path, ".layers[", i, "]", f->path.substr(section->path.size())),
            config::Schema::value_text(*f, &la), config::Schema::value_text(*f, &lb));
    }
    *sb = *sa;  // done with this stack, and with its `layers` as written (kept beside the stack)
    const config::Field* entries = section->child("layers");
    TARN_ASSERT(entries != nullptr, "the recipe schema has no ", section->path, ".layers");
    *static_cast<std::vector<YamlEntry>*>(entries->locate(&b)) = *static_cast<std::vector<YamlEntry>*>(entries->locate(&a));
  }

  for (const config::Field* f : schema.differences(a, b))
    add(f->path, config::Schema::value_text(*f, &a), config::Schema::value_text(*f, &b));

  // In schema order, a stack's per-layer keys where its section starts, layer by layer.
  std::map<std::string, size_t> position;
  const std::vector<const config::Field*> fields = schema.fields();
  for (size_t i = 0; i < fields.size(); ++i) position[fields[i]->path] = i;
  auto order = [&](const SettingChange& s) {
    const size_t layers = s.key.find(".layers[");
    return position[layers == std::string::npos ? s.key : s.key.substr(0, layers)];
  };
  for (std::vector<SettingChange>* list : {&out.refused, &out.allowed})
    std::stable_sort(list->begin(), list->end(),
                     [&](const SettingChange& x, const SettingChange& y) { return order(x) < order(y); });
  return out;
}

void check_resume(const Checkpoint& ckpt, const Recipe& recipe, const Tokenizer& tokenizer) {
  const std::string recipe_path = ckpt.path(kRecipeFile);
  Recipe stored;
  try {
    // Keys this tarn has and the checkpoint's recipe lacks (written before they existed) take
    // their defaults, which are what those runs computed.
    stored = parse_recipe(read_file(recipe_path), recipe_path);
  } catch (const ConfigError& e) {
    throw ResumeRefused({recipe_path, 0}, "",
                        str_cat("this tarn cannot read the recipe the checkpoint was written with, so it cannot "
                                "check that this recipe's model is the same:\n",
                                e.what(), "\nTo train this recipe, ", kNewRun));
  }

  std::vector<ConfigIssue> issues;
  const Tokenizer theirs = Tokenizer::load(ckpt.path(kTokenizerFile));
  const std::string tokenizer_key =
      recipe.data.tokenizer.model.empty() ? "data.tokenizer.train.model_prefix" : "data.tokenizer.model";
  if (const std::string why = vocabulary_difference(theirs, tokenizer); !why.empty())
    issues.push_back({recipe.where(tokenizer_key), tokenizer_key,
                      str_cat("the tokenizer ", tokenizer.path(), " is not the checkpoint's, whose ids the model "
                              "learned (", why, "); --set data.tokenizer.model=", ckpt.path(kTokenizerFile),
                              " continues with the checkpoint's")});

  const ResumeComparison c = compare_for_resume(stored, recipe, tokenizer.vocab_size());
  for (const SettingChange& s : c.refused)
    issues.push_back({origin_of(recipe, s.key), s.key,
                      str_cat("the checkpoint's model has ", s.checkpoint, ", this recipe gives ", s.recipe)});
  if (!issues.empty()) {
    ConfigIssue last;
    last.origin = ConfigOrigin{ckpt.dir, 0};
    last.message = str_cat("resuming from it would go on training a different model with the same weights (",
                           issues.size() == 1 ? "the setting" : "the settings",
                           " above; recipes/README.md, \"Resuming\", lists what may change). ", how_to_go_on(ckpt));
    issues.push_back(std::move(last));
    throw ResumeRefused(std::move(issues));
  }

  if (c.allowed.empty()) return;
  std::string changes;
  for (size_t i = 0; i < c.allowed.size() && i < kLoggedChanges; ++i)
    changes += str_cat(i ? "; " : "", c.allowed[i].key, " ", c.allowed[i].checkpoint, " -> ", c.allowed[i].recipe);
  if (c.allowed.size() > kLoggedChanges) changes += str_cat("; and ", c.allowed.size() - kLoggedChanges, " more");
  log::info("ckpt", "resuming with settings changed since the checkpoint: ", changes);
}

}  // namespace tarn::app
