#include "app/session.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "data/corpus_reader.h"
#include "data/denoising_dataset.h"
#include "data/pair_dataset.h"
#include "framework/backend.h"
#include "framework/config/config_error.h"
#include "framework/log/log.h"
#include "kernels/backend.h"
#include "kernels/blas_info.h"
#include "kernels/mpi/mpi.h"
#include "kernels/parallel.h"
#include "layers/attention/registry.h"
#include "layers/attention/settings.h"

namespace tarn::app {
namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The recipe's model section is the model's config (ModelRecipe : BartConfig), every size as
// written; a vocabulary of 0 there is the tokenizer's, given here.
BartConfig recipe_model_config(const Recipe& recipe, int64_t vocab_size) {
  BartConfig c = recipe.model;
  c.vocab_size = vocab_size;
  return c;
}

}  // namespace

// Bytes this process may use: physical memory, or the cgroup (v2, then v1) limit when lower.
double usable_memory_bytes() {
  double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  for (const char* limit : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(limit);
    double v = 0;
    if (in >> v && v > 0 && v < bytes) bytes = v;  // "max" (no limit) does not parse
  }
  return bytes;
}

namespace {

// A CUDA device's free and total bytes; false where no device of that index answers.
bool cuda_memory(Device device, size_t& free_bytes, size_t& total_bytes) {
  if (device.is_cpu() || device.index >= kernels::cuda_device_count()) return false;
  const kernels::Backend& k = backend_for(device);
  if (!k.memory_info) return false;
  k.memory_info(device.index, &free_bytes, &total_bytes);
  return true;
}

}  // namespace

double device_memory_bytes(Device device) {
  if (device.is_cpu()) return usable_memory_bytes();
  backend_for(device);  // throws "no CUDA device ..." with the reason
  size_t free_bytes = 0, total_bytes = 0;
  return cuda_memory(device, free_bytes, total_bytes) ? static_cast<double>(free_bytes) : usable_memory_bytes();
}

std::string gigabytes(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes < 1e15 ? "%.1f GB" : "%.2g GB", bytes / 1e9);
  return buf;
}

void configure_threads(const Recipe& recipe) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (recipe.training.threads > 0 && cores > 0 && recipe.training.threads > static_cast<int64_t>(cores))
    log::warn("tarn", str_cat("training.threads: ", recipe.training.threads, " is more than this machine's ", cores,
                              " cores: the threads take turns and every step slows down (0 = every core)"));
  if (recipe.training.threads > 0) kernels::set_num_threads(static_cast<int>(recipe.training.threads));
  const auto blas = kernels::blas_info();
  log::info("tarn", "threads: ", kernels::num_threads(), "; BLAS: ", blas.str());
  if (!blas.is_openmp()) log::warn("tarn", "BLAS is not OpenBLAS' OpenMP build: GEMM will be slow");
  if (const std::string hint = kernels::blas_kernel_hint(); !hint.empty()) log::info("tarn", "note: ", hint);
}

std::string short_path(const std::string& p) {
  constexpr size_t kShown = 200;
  return p.size() <= kShown ? p : str_cat(p.substr(0, kShown), "... (", p.size(), " characters)");
}

void create_folder_for(const Recipe& recipe, const char* key, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw ConfigError(recipe.where(key), key,
                      str_cat("cannot create the folder ", short_path(dir), ": ",
                              ec ? ec.message() : "a file of that name is in the way"));
  }
}

Tokenizer open_tokenizer(const Recipe& recipe) {
  const TokenizerRecipe& t = recipe.data.tokenizer;
  if (!t.model.empty()) {
    Tokenizer tok = Tokenizer::load(t.model);
    log::info("data", "tokenizer ", t.model, " (", tok.vocab_size(), " pieces)");
    return tok;
  }
  const std::string path = t.train.model_prefix + ".model";
  if (file_exists(path)) {
    Tokenizer tok = Tokenizer::load(path);
    log::info("data", "tokenizer ", path, " (", tok.vocab_size(), " pieces, trained earlier)");
    return tok;
  }
  const std::string folder = std::filesystem::path(t.train.model_prefix).parent_path().string();
  if (!folder.empty()) create_folder_for(recipe, "data.tokenizer.train.model_prefix", folder);
  log::info("data", "training a SentencePiece ", t.train.model_type, " model of ", t.train.vocab_size,
            " pieces on ", recipe.data.train, " ...");
  const auto start = std::chrono::steady_clock::now();
  TokenizerTrainOptions opt;
  opt.model_type = t.train.model_type;
  opt.character_coverage = t.train.character_coverage;
  opt.input_sentence_size = t.train.input_sentence_size;
  opt.hard_vocab_limit = t.train.hard_vocab_limit;
  opt.num_threads = std::max(1, kernels::num_threads());
  // SentencePiece's sampling seed is 32 bits: the recipe's 64-bit seed folded into it, not cut
  // (a seed below 2^32 is unchanged; 2^32 + 1 is not 1).
  const auto seed = static_cast<uint64_t>(recipe.training.seed);
  opt.seed = static_cast<uint32_t>(seed ^ (seed >> 32));
  const std::string model = Tokenizer::train({recipe.data.train}, t.train.model_prefix,
                                             static_cast<int>(t.train.vocab_size), opt);
  Tokenizer tok = Tokenizer::load(model);
  log::info("data", "tokenizer ", model, " (", tok.vocab_size(), " pieces) trained in ",
            log::duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  return tok;
}

// Every setting was validated when the recipe was loaded (app/recipe), the lengths against
// max_positions included, and the model checks its config when it is built: only the
// tokenizer, known now, is left to check.
BartConfig model_config(const Recipe& recipe, int64_t tokenizer_vocab) {
  BartConfig c = recipe_model_config(recipe, recipe.model.vocab_size > 0 ? recipe.model.vocab_size : tokenizer_vocab);
  TARN_CHECK(c.vocab_size >= tokenizer_vocab, "model.vocab_size: ", c.vocab_size,
             " is smaller than the tokenizer's vocabulary (", tokenizer_vocab, ")");
  return c;
}

namespace {

// The model the memory check sizes: the recipe's vocabulary, else the tokenizer's, else the one
// the recipe would train.
BartConfig sized_model_config(const Recipe& recipe, int64_t tokenizer_vocab) {
  const int64_t vocab = recipe.model.vocab_size > 0 ? recipe.model.vocab_size
                        : tokenizer_vocab > 0       ? tokenizer_vocab
                                                    : recipe.data.tokenizer.train.vocab_size;
  return recipe_model_config(recipe, vocab);
}

TrainingMemory training_memory_of(const BartConfig& c, const Recipe& recipe) {
  const BartConfig::Footprint f = c.footprint();
  const double d = static_cast<double>(c.d_model);
  // One rank holds one micro-batch at a time: its share of the global batch, split again by
  // gradient accumulation.
  const kernels::mpi::LaunchInfo launch = kernels::mpi::launch_info();
  const double micro_batch = static_cast<double>(recipe.training.tokens_per_batch) /
                             static_cast<double>(std::max<int64_t>(1, recipe.training.grad_accumulation)) /
                             static_cast<double>(launch.launched ? std::max(1, launch.world) : 1);
  TrainingMemory t;
  t.state = 16 * f.parameters() + 4 * f.buffer_values;
  t.logits = 2.0 * 4 * micro_batch * static_cast<double>(c.vocab_size);
  // Per token of the batch (source and target alike: denoising keeps them about equal), at least
  // 8 d_model + 2 ffn values per encoder layer (attention inputs, projections and output, norms,
  // the FFN's hidden layer before and after its activation) and 12 d_model + 2 ffn per decoder
  // layer (cross attention on top). For small-linear this counts 288 MiB of the ~346 MiB the
  // allocator's live peak (619 MiB) holds beyond state and logits; the whole estimate is 561 MiB
  // (Train.MemoryEstimateIsALowerBoundOfTheLivePeak keeps it below the live peak).
  const double encoder = static_cast<double>(c.encoder_layers) * (8 * d + 2 * static_cast<double>(c.ffn_dim));
  const double decoder = static_cast<double>(c.decoder_layers) * (12 * d + 2 * static_cast<double>(c.ffn_dim));
  t.activations = 4 * micro_batch * (encoder + decoder);
  // Attention. The kernels' largest workspace (linear attention's [num | den] rows, B H N (e + 1)
  // floats: one at a time), and where softmax attention trains with attention dropout, the
  // probabilities it must keep (HF's composed path: at least P and its dropped copy, 2 x 4 bytes
  // per head and query-key pair). Sized for batches of the longest sequences the data allows,
  // which a batch can be made of: B Nq Nk = micro_batch x Nk.
  t.attention = 4 * micro_batch * (d + static_cast<double>(c.heads));
  // What each attention module adds, as its kind counts it (layers/attention/registry.h:
  // AttentionKindEntry::training_bytes): what the tape keeps of it (wide feature maps, aligned
  // cross-attention's chunk scores, softmax probabilities under attention dropout), and the
  // largest workspace of any one module (they run one at a time). The keys a query sees: the
  // source in the encoder and in cross-attention, the target in decoder self-attention.
  const DataRecipe& data = recipe.data;
  const double source = static_cast<double>(data.pack_tokens > 0 ? std::min(data.max_source_len, data.pack_tokens)
                                                                  : data.max_source_len);
  const double target = static_cast<double>(data.max_target_len);
  const double longest = static_cast<double>(std::max(data.max_source_len, data.max_target_len));
  double widest_workspace = 0;
  c.for_each_attention([&](BartConfig::Stack s, int64_t, const AttentionConfig& a, double count) {
    const AttentionSizes sizes{d, static_cast<double>(c.heads), s == BartConfig::Stack::cross};
    const AttentionBatch batch{micro_batch, longest, s == BartConfig::Stack::decoder_self ? target : source,
                               c.attention_dropout > 0};
    const AttentionTrainingBytes b = attention_training_bytes(a, sizes, batch);
    t.attention += count * b.kept;
    widest_workspace = std::max(widest_workspace, b.workspace);
  });
  t.attention += widest_workspace;
  return t;
}

}  // namespace

TrainingMemory training_memory(const Recipe& recipe, int64_t tokenizer_vocab) {
  return training_memory_of(sized_model_config(recipe, tokenizer_vocab), recipe);
}

namespace {

// The memory a training step lives in: the host's for CPU training, the GPU's free memory for
// CUDA training (the whole step is on the device). A CUDA recipe checked where no GPU answers
// (`tarn config` on a CPU machine) is held to the host's memory for what the host also keeps
// (the state, as checkpoints load it, and the logits).
struct MemoryBudget {
  double bytes = 0;
  std::string whose;  // "this machine's 24.0 GB", "cuda:0's 79.1 GB free"
  std::string has;    // "this machine has 24.0 GB", "cuda:0 has 79.1 GB free of 85.9 GB"
  bool on_device = false;
};

MemoryBudget memory_budget(const Recipe& recipe) {
  if (recipe.training.device != "cpu") {
    try {
      const Device device = Device::parse(recipe.training.device);
      size_t free_bytes = 0, total_bytes = 0;
      if (cuda_memory(device, free_bytes, total_bytes)) {
        const double free = static_cast<double>(free_bytes);
        return {free, str_cat(device.str(), "'s ", gigabytes(free), " free"),
                str_cat(device.str(), " has ", gigabytes(free), " free of ", gigabytes(static_cast<double>(total_bytes))),
                true};
      }
    } catch (const Error&) {
      // no GPU here (training_device reports that where it matters)
    }
  }
  const double have = usable_memory_bytes();
  return {have, "this machine's " + gigabytes(have), "this machine has " + gigabytes(have), false};
}

// The attention size keys and what each scales (window scales nothing in training: the blocked
// kernels read at most the sequence; it is listed for decoding's sake and never saves); which of
// them scale a setting's memory is its kind's to say (layers/attention/settings.h: size_keys).
// An entry's value reset to the default is the model without what that value adds.
struct AttentionSize {
  const char* key;
  int64_t AttentionConfig::*field;
  const char* what;
  bool applies(const AttentionConfig& a) const { return attention_size_key(a, key); }
};
const AttentionSize kAttentionSizes[] = {
    {"conv_size", &AttentionConfig::conv_size, "convolution taps (delta and gated: 2-3 x d_model weights per tap)"},
    {"window", &AttentionConfig::window, "window keys"},
    {"chunk", &AttentionConfig::chunk, "positions per chunk of aligned cross-attention (C x C scores per chunk)"},
    {"favor_features", &AttentionConfig::favor_features, "FAVOR+ features per head"},
    {"taylor_dim", &AttentionConfig::taylor_dim, "Taylor projection width (C(r + P, P) features per head)"},
    {"taylor_order", &AttentionConfig::taylor_order, "Taylor order (C(r + P, P) features per head)"},
};

struct AttentionSizeShare {
  std::string key;  // "model.attention.cross.favor_features", "model.attention.encoder_self.layers[2].conv_size"
  ConfigOrigin where;
  double bytes = 0;  // what the estimate loses with the value at its default
  int64_t value = 0, default_value = 0;
  std::string what;
};

// For every attention size a stack or a per-layer entry gives, the estimate with that value at
// its default (a stack's value reset in the entries that inherit it too): the largest saving.
AttentionSizeShare largest_attention_size_share(const Recipe& recipe, const BartConfig& c, double need) {
  struct Stack {
    const char* name;
    AttentionStack AttentionStacks::*stack;
  };
  const Stack stacks[] = {{"encoder_self", &AttentionStacks::encoder_self},
                          {"decoder_self", &AttentionStacks::decoder_self},
                          {"cross", &AttentionStacks::cross}};
  const AttentionConfig defaults;
  AttentionSizeShare best;
  auto consider = [&](const BartConfig& smaller, std::string key, ConfigOrigin where, const AttentionSize& size,
                      int64_t value) {
    const double rest = training_memory_of(smaller, recipe).total();
    double saved = need - rest;
    if (!std::isfinite(need) && std::isfinite(rest)) saved = std::numeric_limits<double>::infinity();
    if (!(saved > best.bytes)) return;
    best = {std::move(key), where, saved, value, size.field ? defaults.*size.field : 0, size.what};
  };
  if (recipe.model.vocab_size > 0) {  // embeddings, the output bias and the logits
    static const AttentionSize vocabulary = {"vocab_size", nullptr, "vocabulary rows (embeddings and logits)"};
    BartConfig smaller = c;
    smaller.vocab_size = std::min(c.vocab_size, recipe.data.tokenizer.train.vocab_size);
    if (smaller.vocab_size < c.vocab_size) {
      consider(smaller, "model.vocab_size", recipe.where("model.vocab_size"), vocabulary, c.vocab_size);
      best.default_value = 0;  // the tokenizer's
    }
  }
  for (const Stack& s : stacks) {
    const AttentionStack& all = c.attention.*s.stack;
    const std::vector<AttentionConfig>& layers = all.per_layer;
    const std::string prefix = std::string("model.attention.") + s.name;
    for (const AttentionSize& size : kAttentionSizes) {
      const int64_t value = all.*size.field, fallback = defaults.*size.field;
      // The stack's value, wherever it applies (the stack itself, or the entries that inherit it).
      bool applies = layers.empty() && size.applies(all);
      for (const AttentionConfig& a : layers) applies = applies || (a.*size.field == value && size.applies(a));
      if (applies && value != fallback) {
        BartConfig smaller = c;
        AttentionStack& stack = smaller.attention.*s.stack;
        stack.*size.field = fallback;
        for (AttentionConfig& a : stack.per_layer)
          if (a.*size.field == value) a.*size.field = fallback;
        consider(smaller, prefix + "." + size.key, recipe.where(prefix + "." + size.key), size, value);
      }
      for (size_t i = 0; i < layers.size(); ++i) {  // an entry's own value
        const int64_t own = layers[i].*size.field;
        if (own == value || own == fallback || !size.applies(layers[i])) continue;
        BartConfig smaller = c;
        (smaller.attention.*s.stack).per_layer[i].*size.field = fallback;
        consider(smaller, str_cat(prefix, ".layers[", i, "].", size.key), recipe.where(prefix + ".layers"), size, own);
      }
    }
  }
  return best;
}

}  // namespace

void check_memory(const Recipe& recipe, int64_t tokenizer_vocab) {
  const BartConfig c = sized_model_config(recipe, tokenizer_vocab);
  const BartConfig::Footprint f = c.footprint();
  TrainingMemory t = training_memory_of(c, recipe);
  const MemoryBudget budget = memory_budget(recipe);
  if (recipe.training.device != "cpu" && !budget.on_device) t.activations = t.attention = 0;
  const double need = t.total();
  const double have = budget.bytes;
  // Doubles throughout: no size wraps. A sum that is not finite is too big all the same.
  if (std::isfinite(need) && need <= have) {
    if (need > 0.8 * have)
      log::warn("config", str_cat("one training step needs at least ", gigabytes(need), " of ", budget.whose,
                                  ": it may not fit (lower training.tokens_per_batch or the model's size)"));
    return;
  }
  // Name the key whose part is the largest. Activations grow with both the batch and the layer
  // count, so they only decide when the rest alone would fit: then the batch is the lever.
  std::string key = "model.d_model";
  double largest = f.embedding_parameters;
  if (f.encoder_parameters > largest) key = "model.encoder_layers", largest = f.encoder_parameters;
  if (f.decoder_parameters > largest) key = "model.decoder_layers", largest = f.decoder_parameters;
  if (4 * f.buffer_values > 16 * largest) key = "model.attention", largest = f.buffer_values / 4;
  if (t.logits > 16 * largest || t.state + t.logits <= have) key = "training.tokens_per_batch";
  if (t.state + t.logits + t.activations <= have && t.attention > t.activations) key = "model.attention_dropout";
  if (key == "model.d_model" && static_cast<double>(c.max_position_embeddings) > static_cast<double>(c.vocab_size))
    key = "model.max_positions";
  if (key == "model.encoder_layers" || key == "model.decoder_layers")
    if (static_cast<double>(c.ffn_dim) > 8.0 * static_cast<double>(c.d_model)) key = "model.ffn_dim";
  // Layers the preset gave, of a d_model the recipe gave: d_model^2 is the lever.
  if ((key == "model.encoder_layers" || key == "model.decoder_layers") && recipe.origins.count(key) == 0 &&
      recipe.origins.count("model.d_model") > 0)
    key = "model.d_model";
  // A size that alone accounts for most of the need is the one named: an attention size
  // (conv_size, window, chunk, favor_features, taylor_dim, taylor_order) or the vocabulary.
  const AttentionSizeShare share = largest_attention_size_share(recipe, c, need);
  char params[64];
  std::snprintf(params, sizeof params, "%.3g", f.parameters());
  // What the model needs beside what the machine has; each refusal below says what to change.
  const std::string sizes =
      str_cat("this model and its training state need at least ", gigabytes(need), " (", gigabytes(t.state), " for ",
              params, " parameters at 16 bytes each for weights, gradients and AdamW moments, and buffers; ",
              gigabytes(t.logits + t.activations + t.attention),
              " for one batch's logits, activations and attention) and ", budget.has);
  if (!share.key.empty() && share.bytes >= 0.5 * need)
    throw ConfigError(share.where, share.key,
                      str_cat(sizes, ": ", share.value, " ", share.what, " account for ",
                              std::isfinite(share.bytes) ? gigabytes(share.bytes) : std::string("all"),
                              " of it; lower it (default ", share.default_value, ")"));
  throw ConfigError(recipe.where(key), key,
                    str_cat(sizes,
                            key == "model.attention_dropout"
                                ? ": softmax attention with attention dropout keeps every query-key pair's probability; "
                                  "turn it off (model.attention_dropout: 0 uses the blocked kernel, which keeps none), "
                                  "or shorten the sequences (data.max_source_len, max_target_len) or the batch"
                                : ": make the model smaller (model.preset, d_model, ffn_dim, layers, max_positions) or "
                            "the batch (training.tokens_per_batch)"));
}

std::unique_ptr<Dataset> open_dataset(const Recipe& recipe, const Tokenizer& tok, const std::string& path,
                                      uint64_t noise_seed, const char* role) {
  const DataRecipe& d = recipe.data;
  ReadStats read;
  std::unique_ptr<Dataset> out;
  std::string summary;
  if (d.kind == "pairs") {
    PairOptions opt;
    opt.max_source_length = d.max_source_len;
    opt.max_target_length = d.max_target_len;
    opt.bos = d.bos;
    auto ds = std::make_unique<PairDataset>(PairDataset::from_files({path}, tok, opt, &read));
    summary = ds->stats().summary();
    out = std::move(ds);
  } else {
    DenoisingOptions opt;
    opt.max_source_length = d.max_source_len;
    opt.max_target_length = d.max_target_len;
    opt.bos = d.bos;
    if (d.pack_tokens > 0) {
      opt.pack = true;
      opt.max_source_length = std::min(opt.max_source_length, d.pack_tokens);
      opt.max_target_length = std::min(opt.max_target_length, d.pack_tokens);
    }
    opt.noise.mask_ratio = d.noising.mask_ratio;
    opt.noise.poisson_lambda = d.noising.poisson_lambda;
    opt.noise.permute_sentences = d.noising.permute_sentences;
    opt.noise.delete_ratio = d.noising.delete_ratio;
    opt.seed = noise_seed;
    auto ds = std::make_unique<DenoisingDataset>(DenoisingDataset::from_files({path}, tok, opt, &read));
    summary = ds->stats().summary();
    out = std::move(ds);
  }
  for (const std::string& w : read.warnings) log::warn("data", w);
  log::info("data", role, " ", path, ": ", read.summary(), "; ", summary);
  TARN_CHECK(out->size() > 0, role, " data ", path, ": no usable example");
  return out;
}

Device training_device(const Recipe& recipe) {
  const std::string& name = recipe.training.device;
  const Device device = Device::parse(name);
  if (device.is_cpu()) return device;
  const ConfigOrigin where = recipe.where("training.device");
  try {
    kernels::cuda_backend();  // throws "no CUDA device: ..." with the reason
  } catch (const Error& e) {
    throw ConfigError(where, "training.device", "\"" + name + "\": " + e.what());
  }
  const int count = kernels::cuda_device_count();
  if (device.index >= count)
    throw ConfigError(where, "training.device",
                      str_cat("\"", name, "\": no CUDA device ", device.index, " (", count, " visible)"));
  // A device whose causal scan fixes its chunk (kernels/backend.h: the CUDA kernels) refuses
  // any other chunk the recipe gives.
  const std::string chunk_key = "model.attention.decoder_self.chunk";
  const AttentionConfig& causal = recipe.model.attention.decoder_self;
  if (causal.uses_feature_map() && recipe.origins.count(chunk_key) > 0) {
    const kernels::Backend& k = kernels::cuda_backend();
    const kernels::LinearAttentionBf16Kernels* bf16_scan = k.linear_attention_bf16;
    const bool bf16 = parse_precision(recipe.training.precision) == Precision::bf16 && bf16_scan &&
                      recipe.model.d_model / recipe.model.heads <= bf16_scan->max_dim;
    const int64_t fixed = bf16 ? bf16_scan->chunk : k.linear_attention_chunk;
    if (fixed > 0 && causal.chunk != fixed)
      throw ConfigError(recipe.where(chunk_key), chunk_key,
                        str_cat(causal.chunk, " rows: on CUDA the causal scan runs chunks of ", fixed, " rows in ",
                                bf16 ? "bf16" : "f32", "; give ", fixed, " or leave the key out"));
  }
  return device;
}

Precision training_precision(const Recipe& recipe, Device device) {
  const Precision asked = parse_precision(recipe.training.precision);
  if (asked == Precision::f32) {
    log::info("tarn", "precision: f32");
    return Precision::f32;
  }
  const kernels::cpu::Bf16GemmEngine engine = bf16_gemm_engine(device);
  if (!engine.native) {
    log::warn("tarn", str_cat("training.precision: bf16 on ", device.str(), ": ", engine.description,
                              "; training in f32"));
    return Precision::f32;
  }
  const bool bf16_scan = backend_for(device).linear_attention_bf16 != nullptr;
  const bool bf16_softmax = backend_for(device).softmax_attention_bf16 != nullptr;
  const bool bf16_delta = backend_for(device).delta_rule_bf16 != nullptr;
  log::info("tarn", "precision: bf16 mixed: matrix products on ", engine.description, " (the output layer in f32)",
            bf16_scan ? "; linear attention in bf16 with f32 state" : "; linear attention in f32 (no bf16 scan here)",
            bf16_softmax ? "; softmax attention's tile products in bf16, its softmax in f32"
                         : "; softmax attention in f32 (no bf16 kernel here)",
            bf16_delta ? "; the delta rule's products in bf16, its states and gates in f32"
                       : "; the delta rule in f32 (no bf16 kernel here)",
            "; weights, optimizer state, norms and the loss in f32");
  return Precision::bf16;
}

}  // namespace tarn::app
