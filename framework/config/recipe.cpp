#include "framework/config/recipe.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>

#include "framework/config/schema.h"
#include "framework/model_presets.h"
#include "kernels/taylor_map.h"

namespace tarn {
namespace {

using config::Loader;
using config::SectionBuilder;

constexpr const char* kRecipePlaceholder = "{recipe}";
constexpr int64_t kMinTokenizerVocab = 8;  // 4 specials + <mask> + a few pieces

// The size fields a preset fills (framework/model_presets.h), by key.
struct SizeField {
  const char* key;
  int64_t ModelRecipe::*member;
  int64_t ModelPreset::*preset;
};
constexpr SizeField kSizeFields[] = {
    {"d_model", &ModelRecipe::d_model, &ModelPreset::d_model},
    {"encoder_layers", &ModelRecipe::encoder_layers, &ModelPreset::encoder_layers},
    {"decoder_layers", &ModelRecipe::decoder_layers, &ModelPreset::decoder_layers},
    {"heads", &ModelRecipe::heads, &ModelPreset::heads},
    {"ffn_dim", &ModelRecipe::ffn_dim, &ModelPreset::ffn_dim},
    {"max_positions", &ModelRecipe::max_positions, &ModelPreset::max_positions},
};

struct StackField {
  const char* key;
  AttentionStackRecipe AttentionStacksRecipe::*member;
  int64_t ModelRecipe::*layers;  // the stack's layer count
  bool causal, cross;
};
constexpr StackField kAttentionStacks[] = {
    {"encoder_self", &AttentionStacksRecipe::encoder_self, &ModelRecipe::encoder_layers, false, false},
    {"decoder_self", &AttentionStacksRecipe::decoder_self, &ModelRecipe::decoder_layers, true, false},
    {"cross", &AttentionStacksRecipe::cross, &ModelRecipe::decoder_layers, false, true},
};

// Hybrid cross-attention mixes the window with linear attention only: delta and gated read the
// source through a state written once, which has no window to share the projections with.
constexpr const char* kCrossHybridGlobal =
    "hybrid cross-attention takes global: linear (a feature map); delta and gated are self-attention only "
    "under hybrid (use kind: delta or gated on their own in cross-attention)";

// Aligned decay pairs a target position with the source position of the same index: there is
// no second sequence to align with in self-attention (kind gated decays there).
constexpr const char* kSelfAlignDecay =
    "cross-attention only: it weighs source position j by its distance from target position i (for a decay in "
    "self-attention, use kind: gated or delta)";

bool is_device(const std::string& s) {
  if (s == "cpu" || s == "cuda") return true;
  if (s.rfind("cuda:", 0) != 0 || s.size() == 5 || s.size() > 8) return false;
  return s.find_first_not_of("0123456789", 5) == std::string::npos;
}

// A stack's keys (S = AttentionStackRecipe) or one per-layer entry's (S = AttentionConfig).
template <class S>
void declare_attention(SectionBuilder<S> a, bool causal) {
  a.template enumeration<AttentionKind>(&AttentionConfig::kind, "kind",
                "softmax (exact, O(N^2) in length), linear (feature maps, O(N)), delta (the gated delta rule, "
                "O(N)), gated (delta without the erase: decayed linear attention, O(N)) or hybrid (softmax over a "
                "sliding window plus linear attention, mixed by a learned gate, O(N window); in cross-attention the "
                "window is around the target position, over linear attention only)",
                {{"softmax", AttentionKind::softmax},
                 {"linear", AttentionKind::linear},
                 {"delta", AttentionKind::delta},
                 {"gated", AttentionKind::gated},
                 {"hybrid", AttentionKind::hybrid}});
  if (causal) {
    a.fixed("causal", "the decoder never attends to later positions", "true",
            "decoder self-attention is always causal");
  }
  using kernels::cpu::FeatureMap;
  std::vector<std::pair<std::string, FeatureMap>> maps;
  for (FeatureMap m : {FeatureMap::elu1, FeatureMap::relu, FeatureMap::exp, FeatureMap::favor, FeatureMap::taylor,
                       FeatureMap::hedgehog, FeatureMap::identity})
    maps.emplace_back(kernels::cpu::feature_map_name(m), m);
  a.template enumeration<FeatureMap>(&AttentionConfig::feature_map, "feature_map",
                "linear attention's (and hybrid's global part's) feature map phi (taylor: Based's Taylor map of exp(q.k) to order "
                "taylor_order on a learned taylor_dim-wide projection of each head; hedgehog: [softmax(W x), softmax(-W x)] with a learned "
                "dh x dh W per head, 2 dh features; identity: ablations only, warns)",
                maps);
  a.integer(&AttentionConfig::chunk, "chunk",
            "rows per chunk of the causal linear scan on the CPU (causal stacks only); the CUDA kernels use 32 "
            "(f32) and 64 (bf16), and a run on CUDA refuses any other value given here. delta: tokens between "
            "the states its backward keeps; aligned cross-attention (align_decay): positions per chunk of its "
            "decay-masked products")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxChunk));
  a.integer(&AttentionConfig::conv_size, "conv_size",
            "delta and gated: taps of the short causal depthwise convolution on q, k and v (1 = none)")
      .min(1);
  a.integer(&AttentionConfig::window, "window",
            "hybrid: keys the softmax part sees (causal: the last `window`; bidirectional: within window / 2 either "
            "side; cross-attention: the source positions within window / 2 of the target position)")
      .min(1)
      .max(static_cast<double>(AttentionConfig::kMaxWindow));
  a.template enumeration<AttentionKind>(&AttentionConfig::global, "global",
                "hybrid: the global part over the whole sequence: linear (feature_map on the layer's q and k), delta "
                "or gated (that layer on the same projections, with its convolutions, gates and output norm; "
                "self-attention only)",
                {{"linear", AttentionKind::linear}, {"delta", AttentionKind::delta}, {"gated", AttentionKind::gated}});
  a.integer(&AttentionConfig::favor_features, "favor_features", "FAVOR+ random features m; 0 = the head dimension")
      .non_negative()
      .max(static_cast<double>(AttentionConfig::kMaxFavorFeatures));
  a.integer(&AttentionConfig::favor_redraw_every, "favor_redraw_every",
            "redraw the FAVOR+ projection every this many steps; 0 = never")
      .non_negative();
  a.number(&AttentionConfig::eps, "eps", "linear attention's normaliser epsilon: num / (den + eps)").positive();
  a.integer(&AttentionConfig::taylor_order, "taylor_order",
            "taylor: the order P of exp's series, sum_{n <= P} x^n / n! (2: Based's map; 4: sharper; an even order "
            "keeps the kernel positive)")
      .check([](const int64_t& v) { return v == 2 || v == 4; }, "2 or 4");
  a.integer(&AttentionConfig::taylor_dim, "taylor_dim",
            "taylor: r, the width of the learned per-head projection the map takes; C(r + P, P) features (r = 16: "
            "153 at order 2, 4,845 at order 4; r = 8, order 4: 495)")
      .min(1)
      .max(255);
  a.number(&AttentionConfig::align_decay, "align_decay",
           "linear cross-attention: target position i weighs source position j by gamma_h^|i - j|; head 0 reads the "
           "whole source (gamma 1), head h >= 1 decays by align_decay^(2^(h - 1)) a position (0.9: 0.9, 0.81, 0.66); "
           "0 = off. A linear-time prior that target and source align near the diagonal (denoising)")
      .min(0)
      .below(1);
  a.boolean(&AttentionConfig::align_gate, "align_gate",
            "linear cross-attention with align_decay: per head and target position a learned gate mixes the "
            "decayed read with the plain read of the whole source, g aligned + (1 - g) plain, so that a head can "
            "drop the diagonal prior where target and source do not align by position (reorderings, offsets)");
}

config::Schema build_schema() {
  config::Schema schema("tarn recipe");
  auto root = schema.root<Recipe>();

  auto model = root.section(&Recipe::model, "model", "the encoder-decoder (BART layout)");
  model.choice(&ModelRecipe::preset, "preset",
               "sizes: tiny (d_model 64, 2+2 layers), small (256, 4+4), base (768, 6+6, BART-base), "
               "custom (give every size); sizes given below override the preset",
               {"tiny", "small", "base", "custom"});
  // Sizes are bounded by the types that finally hold them (framework/model_presets.h).
  model.integer(&ModelRecipe::vocab_size, "vocab_size", "embedding rows; 0 = the tokenizer's vocabulary size")
      .non_negative()
      .max(static_cast<double>(kMaxVocabSize));
  const std::string from_preset = "from model.preset";
  model.integer(&ModelRecipe::d_model, "d_model", "hidden size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::encoder_layers, "encoder_layers", "encoder layers").min(1).default_note(from_preset);
  model.integer(&ModelRecipe::decoder_layers, "decoder_layers", "decoder layers").min(1).default_note(from_preset);
  model.integer(&ModelRecipe::heads, "heads", "attention heads (every stack); must divide d_model")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::ffn_dim, "ffn_dim", "feed-forward inner size")
      .min(1)
      .max(static_cast<double>(kMaxModelDim))
      .default_note(from_preset);
  model.integer(&ModelRecipe::max_positions, "max_positions", "learned positions, the longest sequence")
      .min(1)
      .max(static_cast<double>(kMaxPositions))
      .default_note(from_preset);
  model.number(&ModelRecipe::dropout, "dropout", "dropout on hidden states").fraction();
  model.number(&ModelRecipe::attention_dropout, "attention_dropout", "dropout on softmax attention weights")
      .fraction();
  model.number(&ModelRecipe::activation_dropout, "activation_dropout", "dropout after the feed-forward GELU")
      .fraction();
  model.boolean(&ModelRecipe::scale_embedding, "scale_embedding", "multiply token embeddings by sqrt(d_model)");
  model.string(&ModelRecipe::init_from, "init_from",
               "a checkpoint or run folder (e.g. one tarn import wrote) whose tensors of the same name and shape a "
               "new run starts from; the tensors this model adds (a new attention's) keep their initialisation; "
               "a shape that differs is an error; \"\" = initialise everything; ignored when resuming");
  model.number(&ModelRecipe::init_std, "init_std", "standard deviation of the normal weight init").positive();
  auto attention = model.section(&ModelRecipe::attention, "attention", "attention per stack (docs/design.md section 2)");
  const char* const descriptions[] = {"encoder self-attention (bidirectional)", "decoder self-attention (causal)",
                                      "decoder-to-encoder attention"};
  for (size_t i = 0; i < std::size(kAttentionStacks); ++i) {
    const StackField& stack = kAttentionStacks[i];
    auto section = attention.section(stack.member, stack.key, descriptions[i]);
    declare_attention(section, stack.causal);
    section.entries(&AttentionStackRecipe::layers, "layers",
                    "attention per layer, one entry per layer of the stack: a kind name or a map of this section's "
                    "keys, over the settings given beside `layers` (e.g. [linear, linear, linear, {kind: hybrid, "
                    "window: 128}]); [] = every layer as above");
  }

  auto data = root.section(&Recipe::data, "data", "corpora, tokenizer, lengths and noise");
  data.choice(&DataRecipe::kind, "kind", "denoising: BART pre-training on plain text; pairs: source<TAB>target lines",
              {"denoising", "pairs"});
  data.string(&DataRecipe::train, "train", "training corpus, one example per line").required();
  data.string(&DataRecipe::valid, "valid", "validation corpus; \"\" = no validation");
  data.string(&DataRecipe::test, "test", "test corpus (tarn eval); \"\" = none");
  auto tokenizer = data.section(&DataRecipe::tokenizer, "tokenizer", "SentencePiece: give either model or train");
  tokenizer
      .string(&TokenizerRecipe::model, "model",
              "an existing SentencePiece .model, or a byte-level BPE tokenizer.json (HuggingFace's; a checkpoint's "
              "tokenizer.model may hold either); \"\" = train a SentencePiece model (see train)")
      .check(
          [](const std::string& s) {
            auto ends = [&](const std::string& e) { return s.size() > e.size() && s.substr(s.size() - e.size()) == e; };
            return s.empty() || ends(".model") || ends(".json");
          },
          "a path ending in .model or .json, or \"\"");
  auto train = tokenizer.section(&TokenizerRecipe::train, "train", "how to train the tokenizer on data.train");
  train.integer(&TokenizerTrainRecipe::vocab_size, "vocab_size", "pieces, specials and <mask> included")
      .min(kMinTokenizerVocab)
      .max(static_cast<double>(kMaxVocabSize));  // SentencePiece's vocab_size is an int32
  train.integer(&TokenizerTrainRecipe::input_sentence_size, "input_sentence_size",
                "lines sampled to train on; 0 = every line")
      .non_negative();
  train.number(&TokenizerTrainRecipe::character_coverage, "character_coverage",
               "fraction of characters covered (1.0 for English)")
      .above(0)
      .max(1);
  train.string(&TokenizerTrainRecipe::model_prefix, "model_prefix",
               "writes <prefix>.model and .vocab; \"\" = <folder of data.train>/spm<vocab_size>");
  train.choice(&TokenizerTrainRecipe::model_type, "model_type", "SentencePiece model type",
               {"unigram", "bpe", "char", "word"});
  train.boolean(&TokenizerTrainRecipe::hard_vocab_limit, "hard_vocab_limit",
                "false: vocab_size is only an upper bound (tiny corpora)");
  data.integer(&DataRecipe::max_source_len, "max_source_len", "longest source in tokens (</s> included)").min(2);
  data.integer(&DataRecipe::max_target_len, "max_target_len", "longest target in tokens (</s> included)").min(2);
  data.integer(&DataRecipe::pack_tokens, "pack_tokens",
               "denoising: join consecutive lines up to this many tokens; 0 = one line per example")
      .non_negative();
  data.boolean(&DataRecipe::bos, "bos",
               "start source and target with <s>, as HuggingFace's BART tokenizer does (decoder input </s> <s> ...); "
               "generation then forces <s> first and </s> at --max-length, as BART's forced_bos/eos_token_id. "
               "tarn import sets it");
  auto noising = data.section(&DataRecipe::noising, "noising", "BART noise for denoising (Lewis et al. 2020, 2.2)");
  noising.number(&NoisingRecipe::mask_ratio, "mask_ratio", "fraction of tokens masked by text infilling").fraction();
  noising.number(&NoisingRecipe::poisson_lambda, "poisson_lambda", "mean span length of text infilling")
      .above(0)
      .max(50);
  noising.boolean(&NoisingRecipe::permute_sentences, "permute_sentences", "shuffle the lines of a packed example");
  noising.number(&NoisingRecipe::delete_ratio, "delete_ratio", "probability of deleting each unmasked token")
      .fraction();

  auto optimizer = root.section(&Recipe::optimizer, "optimizer", "the optimizer and its learning-rate schedule");
  optimizer.choice(&OptimizerRecipe::name, "name", "the optimizer (AdamW, decoupled weight decay)", {"adamw"});
  optimizer.number(&OptimizerRecipe::lr, "lr", "peak learning rate, reached at the end of warm-up").positive();
  optimizer.numbers(&OptimizerRecipe::betas, "betas", "Adam's moment decay rates [beta1, beta2]").fraction();
  optimizer.number(&OptimizerRecipe::eps, "eps", "Adam's denominator epsilon").positive();
  optimizer.number(&OptimizerRecipe::weight_decay, "weight_decay", "decoupled weight decay (not biases or norms)")
      .non_negative();
  optimizer.integer(&OptimizerRecipe::warmup_steps, "warmup_steps", "linear warm-up from 0 to lr").non_negative();
  optimizer.choice(&OptimizerRecipe::schedule, "schedule",
                   "decay after warm-up (linear and cosine end at min_lr at training.max_steps)",
                   {"constant", "linear", "cosine", "inverse_sqrt"});
  optimizer.number(&OptimizerRecipe::min_lr, "min_lr", "the floor of the decay").non_negative();
  optimizer.number(&OptimizerRecipe::clip_norm, "clip_norm", "clip the global gradient norm to this; 0 = off")
      .non_negative();

  auto training = root.section(&Recipe::training, "training", "batches, stopping, device");
  training.integer(&TrainingRecipe::tokens_per_batch, "tokens_per_batch",
                   "padded tokens per batch: rows * longest side <= this")
      .min(1);
  training.integer(&TrainingRecipe::grad_accumulation, "grad_accumulation", "batches per optimizer step").min(1);
  training.integer(&TrainingRecipe::max_steps, "max_steps", "stop after this many optimizer steps; 0 = no limit")
      .non_negative();
  training.integer(&TrainingRecipe::max_epochs, "max_epochs", "stop after this many epochs; 0 = no limit")
      .non_negative();
  training.number(&TrainingRecipe::max_time_minutes, "max_time_minutes",
                  "stop after this much wall-clock time; 0 = no limit")
      .non_negative();
  training.integer(&TrainingRecipe::seed, "seed", "seed of every random stream (Philox)").non_negative();
  training.string(&TrainingRecipe::device, "device", "where to train: cpu, cuda or cuda:N")
      .check(is_device, "cpu, cuda or cuda:N");
  training.choice(&TrainingRecipe::precision, "precision",
                  "matrix products: f32, or bf16 mixed precision (bf16 operands on bf16 hardware with f32 "
                  "accumulation; weights, optimizer state, norms, softmax and the loss in f32; checkpoints f32). "
                  "Where the device has no bf16 hardware, tarn warns and trains in f32",
                  {"f32", "bf16"});
  training.integer(&TrainingRecipe::threads, "threads", "CPU threads; 0 = every core (more than the cores only slows a run)")
      .non_negative()
      .max(1024);
  training.number(&TrainingRecipe::label_smoothing, "label_smoothing", "label smoothing of the cross-entropy")
      .fraction();
  training.integer(&TrainingRecipe::max_bad_steps, "max_bad_steps",
                   "non-finite losses in a row before stopping (each such step is skipped)")
      .min(1);
  training.number(&TrainingRecipe::collective_timeout_s, "collective_timeout_s",
                  "data-parallel runs: seconds a collective may wait for the other ranks before the job is ended")
      .positive();
  training.integer(&TrainingRecipe::check_replicas_every_steps, "check_replicas_every_steps",
                   "data-parallel runs: compare a parameter checksum across ranks every this many steps; 0 = at "
                   "start only")
      .non_negative();
  training.boolean(&TrainingRecipe::shard_optimizer, "shard_optimizer",
                   "data-parallel runs: ZeRO-1, each rank keeps and updates 1/ranks of the AdamW moments "
                   "(gradients reduce-scattered, parameters all-gathered)");
  training.boolean(&TrainingRecipe::overlap_communication, "overlap_communication",
                   "data-parallel runs: start each bucket's gradient all-reduce during the backward, as soon as "
                   "its gradients are final (same results; off: all at once after it; no effect with "
                   "shard_optimizer)");
  training.number(&TrainingRecipe::gradient_bucket_mb, "gradient_bucket_mb",
                  "data-parallel runs: MiB of gradients per all-reduce call (smaller buckets start sooner during "
                  "the backward; larger ones make fewer calls)")
      .positive();

  auto validation = root.section(&Recipe::validation, "validation", "periodic validation on data.valid");
  validation.integer(&ValidationRecipe::every_steps, "every_steps", "validate every this many steps; 0 = at the end")
      .non_negative();
  validation.integer(&ValidationRecipe::max_batches, "max_batches", "batches per validation; 0 = the whole set")
      .non_negative();
  validation.integer(&ValidationRecipe::early_stopping_patience, "early_stopping_patience",
                     "stop after this many validations without improvement; 0 = off")
      .non_negative();

  auto checkpoints = root.section(&Recipe::checkpoints, "checkpoints", "where and how often to save");
  checkpoints.string(&CheckpointRecipe::dir, "dir", "run folder; {recipe} = the recipe file's name")
      .check([](const std::string& s) { return !s.empty(); }, "a non-empty path");
  checkpoints.integer(&CheckpointRecipe::every_steps, "every_steps", "save every this many steps; 0 = at the end")
      .non_negative();
  checkpoints.integer(&CheckpointRecipe::keep_last, "keep_last", "periodic checkpoints kept; 0 = all")
      .non_negative()
      .max(std::numeric_limits<int>::max());  // prune_checkpoints (framework/io/checkpoint_dir.h) takes an int
  checkpoints.boolean(&CheckpointRecipe::keep_best, "keep_best", "also keep the best validation checkpoint");

  auto logging = root.section(&Recipe::logging, "logging", "progress lines and metrics");
  logging.integer(&LoggingRecipe::every_steps, "every_steps", "a progress line every this many steps").min(1);
  logging.string(&LoggingRecipe::metrics_file, "metrics_file",
                 "JSON lines of every logged metric; \"\" = <checkpoints.dir>/metrics.jsonl");
  logging.string(&LoggingRecipe::tensorboard, "tensorboard",
                 "folder of TensorBoard event files (scalars as the run goes); \"\" = <checkpoints.dir>, off = none");
  logging.choice(&LoggingRecipe::color, "color", "colored terminal output", {"auto", "always", "never"});

  auto linearize = root.section(&Recipe::linearize, "linearize",
                                "attention transfer before training a new run (model.init_from a softmax model): "
                                "only the new attention parameters train, to match softmax attention layer by layer");
  linearize.integer(&LinearizeRecipe::steps, "steps", "transfer steps (batches of training.tokens_per_batch); 0 = none")
      .non_negative();
  linearize.number(&LinearizeRecipe::lr, "lr", "AdamW learning rate of the transfer (constant, no weight decay)")
      .positive();
  return schema;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

void resolve_layers(Recipe& r, Loader& loader);

// Resolution (see recipe.h): presets, "{recipe}", derived paths, per-layer attention.
void resolve(Recipe& r, Loader& loader, const std::string& source) {
  if (r.model.preset == "custom") {
    for (const SizeField& f : kSizeFields) {
      const std::string key = std::string("model.") + f.key;
      if (!loader.given(key)) loader.error(key, "missing required value (model.preset is custom: give every size)");
    }
  } else if (const ModelPreset* p = find_model_preset(r.model.preset)) {
    for (const SizeField& f : kSizeFields) {
      if (!loader.given(std::string("model.") + f.key)) r.model.*f.member = p->*f.preset;
    }
  }

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
  resolve_layers(r, loader);
}

// The schema of one per-layer entry: the keys of a stack, minus `layers`.
std::unique_ptr<config::Schema> make_layer_schema(bool causal) {
  auto schema = std::make_unique<config::Schema>("attention layer");
  declare_attention(schema->root<AttentionConfig>(), causal);
  return schema;
}
const config::Schema& layer_schema(bool causal) {
  static const std::unique_ptr<config::Schema> plain = make_layer_schema(false), causal_stack = make_layer_schema(true);
  return causal ? *causal_stack : *plain;
}

// Each entry of a stack's `layers` parsed over the stack's settings (so that keys given beside
// `layers`, in the file or by --set, apply to every entry that does not set them itself); its
// issues are reported at the entry, under model.attention.STACK.layers[i].
void resolve_layers(Recipe& r, Loader& loader) {
  for (const StackField& stack : kAttentionStacks) {
    AttentionStackRecipe& a = r.model.attention.*stack.member;
    a.per_layer.clear();
    if (a.layers.empty()) continue;
    const std::string key = std::string("model.attention.") + stack.key + ".layers";
    const int64_t layers = r.model.*stack.layers;
    if (static_cast<int64_t>(a.layers.size()) != layers) {
      loader.error(key, str_cat("expected one entry per layer: ", layers, " (model.",
                                stack.layers == &ModelRecipe::encoder_layers ? "encoder_layers" : "decoder_layers",
                                "), got ", a.layers.size()));
      continue;
    }
    for (size_t i = 0; i < a.layers.size(); ++i) {
      const YamlEntry& entry = a.layers[i];
      const std::string entry_key = str_cat(key, "[", i, "]");
      AttentionConfig layer = a;  // the stack's settings; the entry's keys replace them
      Loader sub(layer_schema(stack.causal), &layer);
      const bool name_only = entry.text.empty() || entry.text[0] != '{';
      sub.apply_text(name_only ? "{kind: " + entry.text + "}" : entry.text, entry.origin.source);
      for (const ConfigIssue& issue : sub.errors())
        loader.error_at(entry.origin, issue.key.empty() ? entry_key : entry_key + "." + issue.key, issue.message);
      if (sub.ok() && stack.cross && layer.is_hybrid() && layer.has_delta_block())
        loader.error_at(entry.origin, entry_key + ".global", kCrossHybridGlobal);
      if (sub.ok() && !stack.cross && layer.align_decay > 0)
        loader.error_at(entry.origin, entry_key + ".align_decay", kSelfAlignDecay);
      a.per_layer.push_back(layer);
    }
  }
}

// The origin of the first of `keys` that was given, else of the last one's section.
ConfigOrigin first_given(const Loader& loader, std::initializer_list<std::string> keys) {
  for (const std::string& k : keys) {
    if (loader.given(k)) return loader.origin(k);
  }
  return loader.origin(*(keys.end() - 1));
}

// Rules that involve more than one field; run once every field is valid on its own.
void check_cross_field(const Recipe& r, Loader& loader) {
  const ModelRecipe& m = r.model;
  const DataRecipe& d = r.data;
  if (m.d_model % m.heads != 0) {
    loader.error_at(first_given(loader, {"model.heads", "model.d_model", "model.preset"}), "model.heads",
                    str_cat("expected a divisor of model.d_model = ", m.d_model, ", got ", m.heads));
  }
  if (d.max_source_len > m.max_positions) {
    loader.error("data.max_source_len", str_cat("expected at most model.max_positions = ", m.max_positions, ", got ",
                                                d.max_source_len));
  }
  if (d.max_target_len > m.max_positions) {
    loader.error("data.max_target_len", str_cat("expected at most model.max_positions = ", m.max_positions, ", got ",
                                                d.max_target_len));
  }
  if (d.pack_tokens > d.max_source_len) {
    loader.error("data.pack_tokens", str_cat("expected at most data.max_source_len = ", d.max_source_len,
                                             " (0 = no packing), got ", d.pack_tokens));
  }
  const int64_t longest = std::max(d.max_source_len, d.max_target_len);
  if (r.training.tokens_per_batch < longest) {
    loader.error("training.tokens_per_batch",
                 str_cat("expected at least the longest example, max(data.max_source_len, data.max_target_len) = ",
                         longest, ", got ", r.training.tokens_per_batch));
  }

  // Either an existing tokenizer or settings to train one. A model given with --set wins over
  // train settings from the file (reusing a tokenizer with a recipe that trains one).
  const TokenizerRecipe& tok = d.tokenizer;
  if (!tok.model.empty()) {
    bool train_from_file = false, train_from_override = false;
    ConfigOrigin train_at;
    for (const auto& [key, at] : loader.origins()) {
      if (key.rfind("data.tokenizer.train", 0) != 0) continue;
      (at.is_override() ? train_from_override : train_from_file) = true;
      if (train_at.source.empty()) train_at = at;
    }
    if (train_from_override || (train_from_file && !loader.origin("data.tokenizer.model").is_override())) {
      loader.error_at(train_at, "data.tokenizer",
                      "expected either model (an existing tokenizer) or train (settings to train one), got both");
    } else if (train_from_file) {
      loader.warn_at(train_at, "data.tokenizer.train", "ignored: data.tokenizer.model is set with --set");
    }
  }
  if (tok.model.empty() && m.vocab_size != 0 && m.vocab_size < tok.train.vocab_size) {
    loader.error("model.vocab_size", str_cat("expected 0 (the tokenizer's) or at least data.tokenizer.train.vocab_size = ",
                                             tok.train.vocab_size, ", got ", m.vocab_size));
  }

  const OptimizerRecipe& o = r.optimizer;
  const TrainingRecipe& t = r.training;
  if (o.min_lr > o.lr) {
    loader.error("optimizer.min_lr", str_cat("expected at most optimizer.lr = ", o.lr, ", got ", o.min_lr));
  }
  if ((o.schedule == "linear" || o.schedule == "cosine") && t.max_steps == 0) {
    loader.error("optimizer.schedule", "expected constant or inverse_sqrt when training.max_steps is 0 (" +
                                           o.schedule + " decays until training.max_steps), got " + o.schedule);
  }
  if (t.max_steps > 0 && o.warmup_steps > t.max_steps) {
    // A decaying schedule needs its warm-up to end before max_steps; the others merely stop
    // during warm-up, which a first stage that a resumed run continues may well want.
    if (o.schedule == "linear" || o.schedule == "cosine")
      loader.error("optimizer.warmup_steps",
                   str_cat("expected at most training.max_steps = ", t.max_steps, " with a ", o.schedule,
                           " schedule, got ", o.warmup_steps));
    else
      loader.warn("optimizer.warmup_steps", str_cat(o.warmup_steps, " is longer than training.max_steps = ",
                                                    t.max_steps, ": the run ends during warm-up"));
  }
  if (t.max_steps == 0 && t.max_epochs == 0 && t.max_time_minutes == 0) {
    loader.error_at(first_given(loader, {"training.max_steps", "training.max_epochs", "training.max_time_minutes",
                                         "training"}),
                    "training", "expected a stopping condition: max_steps, max_epochs or max_time_minutes > 0");
  }
  if (d.valid.empty() && r.validation.early_stopping_patience > 0) {
    loader.error("validation.early_stopping_patience",
                 str_cat("expected 0 when data.valid is empty (early stopping needs validation), got ",
                         r.validation.early_stopping_patience));
  }

  // Warnings: accepted, but probably not what was meant.
  for (const StackField& stack : kAttentionStacks) {
    const std::string prefix = std::string("model.attention.") + stack.key;
    const AttentionStackRecipe& a = m.attention.*stack.member;
    if (!stack.cross && a.align_decay > 0) loader.error(prefix + ".align_decay", kSelfAlignDecay);
    if (a.align_gate && !(a.align_decay > 0))
      loader.error(prefix + ".align_gate", "needs align_decay > 0 (the decayed read it gates)");
    if (!a.layers.empty()) continue;  // settings beside `layers` are its entries' defaults
    // Why a key of another kind (or, in a hybrid, of another global part) does nothing here.
    const std::string ignored = a.is_hybrid() ? str_cat("ignored: global is ", attention_kind_name(a.global))
                                              : str_cat("ignored: kind is ", attention_kind_name(a.kind));
    if (!a.has_delta_block() && loader.given(prefix + ".conv_size")) loader.warn(prefix + ".conv_size", ignored);
    for (const char* key : {"window", "global"}) {
      if (!a.is_hybrid() && loader.given(prefix + "." + key)) loader.warn(prefix + "." + key, ignored);
    }
    if (a.is_hybrid() && stack.cross && a.has_delta_block()) {
      loader.error(prefix + ".global", kCrossHybridGlobal);
      continue;
    }
    if (!a.uses_feature_map()) {
      for (const char* key :
           {"feature_map", "favor_features", "favor_redraw_every", "eps", "taylor_order", "taylor_dim", "align_decay"}) {
        if (loader.given(prefix + "." + key)) loader.warn(prefix + "." + key, ignored);
      }
      if (a.is_softmax() && loader.given(prefix + ".chunk")) loader.warn(prefix + ".chunk", "ignored: kind is softmax");
      continue;
    }
    if (a.is_hybrid() && loader.given(prefix + ".align_decay"))
      loader.warn(prefix + ".align_decay", "ignored: kind is hybrid (its window aligns)");
    if (a.feature_map == kernels::cpu::FeatureMap::identity) {
      loader.warn_at(first_given(loader, {prefix + ".feature_map", prefix + ".kind", prefix}), prefix + ".feature_map",
                     "identity makes linear attention a mean over positions: for ablations only");
    }
    if (a.feature_map != kernels::cpu::FeatureMap::taylor) {
      for (const char* key : {"taylor_order", "taylor_dim"}) {
        if (loader.given(prefix + "." + key)) loader.warn(prefix + "." + key, "ignored: feature_map is not taylor");
      }
    } else if (const int64_t features = kernels::cpu::taylor_feature_count(a.taylor_dim, static_cast<int>(a.taylor_order));
               features > kernels::cpu::kMaxTaylorFeatures) {
      loader.error(prefix + ".taylor_dim", str_cat(a.taylor_dim, " at taylor_order ", a.taylor_order, " gives ", features,
                                                   " features, above the ", kernels::cpu::kMaxTaylorFeatures,
                                                   " the kernels take"));
    }
    if (a.feature_map != kernels::cpu::FeatureMap::favor) {
      for (const char* key : {"favor_features", "favor_redraw_every"}) {
        if (loader.given(prefix + "." + key)) loader.warn(prefix + "." + key, "ignored: feature_map is not favor");
      }
    }
  }
  if (d.kind == "pairs") {
    if (loader.given("data.noising")) loader.warn("data.noising", "ignored: data.kind is pairs");
    if (d.pack_tokens > 0) loader.warn("data.pack_tokens", "ignored: data.kind is pairs");
  }
  if (d.valid.empty() && loader.given("validation")) {
    loader.warn("validation", "ignored: data.valid is empty, so validation never runs");
  }
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
  std::string p = key;
  while (!p.empty()) {
    const auto it = origins.find(p);
    if (it != origins.end()) return it->second;
    const size_t dot = p.rfind('.');
    p = dot == std::string::npos ? "" : p.substr(0, dot);
  }
  return {source, 0};
}

const config::Schema& recipe_schema() {
  static const config::Schema schema = build_schema();
  return schema;
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
