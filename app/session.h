#pragma once
// Everything a tarn command builds from a recipe before it can work: threads, the tokenizer
// (loaded, or trained on the training corpus the first time), the datasets, and the model
// configuration. Shared by train, eval, export, generate and denoise.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/recipe/recipe.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "framework/device.h"
#include "framework/precision.h"
#include "layers/config.h"

namespace tarn::app {

// Applies training.threads (0 = every core) and logs which BLAS is loaded.
void configure_threads(const Recipe& recipe);

// Bytes this process may use: physical memory, or the cgroup's limit when lower.
double usable_memory_bytes();

// Bytes in decimal gigabytes for a message: "25.3 GB" (astronomical sizes as "2.2e+07 GB").
std::string gigabytes(double bytes);

// Bytes a device offers now: usable_memory_bytes() for the CPU, the GPU's free memory
// (cudaMemGetInfo) for a CUDA device. Throws "no CUDA device ..." where there is none.
double device_memory_bytes(Device device);

// A path for a message: whole when it is of a sane length, else its start and its length.
std::string short_path(const std::string& p);

// Creates folder `dir` (and its parents) that the recipe's `key` names; a ConfigError at that
// key's line when it cannot be (exit code 2), instead of a failure deeper down.
void create_folder_for(const Recipe& recipe, const char* key, const std::string& dir);

// data.tokenizer.model when set; else <model_prefix>.model, trained on data.train if missing
// (model_prefix's folder is created).
Tokenizer open_tokenizer(const Recipe& recipe);

// training.device as a Device, checked against what this build and machine have: a CUDA device
// without a CUDA backend or GPU is a ConfigError that says so (exit code 2), not a crash.
Device training_device(const Recipe& recipe);

// training.precision on `device`, logged with the engine that runs its products: bf16 where the
// device has bf16 hardware, else a warning that says why and f32 (framework/precision.h).
Precision training_precision(const Recipe& recipe, Device device);

// The model recipe mapped onto the model's config; vocab_size 0 takes the tokenizer's.
BartConfig model_config(const Recipe& recipe, int64_t tokenizer_vocab);

// A lower bound on the memory one training step holds, in bytes, by part.
struct TrainingMemory {
  double state = 0;        // weights, gradients, AdamW's two moments (f32), and the buffers
  double logits = 0;       // one micro-batch's logits and their gradient
  double activations = 0;  // what the autograd tape keeps for the backward pass
  double attention = 0;    // the attention kernels' workspace, and softmax's probabilities where
                           // attention dropout makes it keep them (longest sequences)
  double total() const { return state + logits + activations + attention; }
};
TrainingMemory training_memory(const Recipe& recipe, int64_t tokenizer_vocab = 0);

// Refuses, before anything is allocated, a recipe whose model and training state cannot fit in
// the memory it trains in: this machine's (physical memory, or the cgroup's limit when lower)
// for CPU training, the GPU's free memory for CUDA training. A ConfigError that names the key
// responsible and the sizes: an attention size (conv_size, chunk, favor_features, taylor_dim,
// taylor_order; a per-layer entry's own value at the entry) or vocab_size when it alone
// accounts for most of the need, else the model's largest part or the batch. Every sum is a
// double; one that is not finite counts as too big. `tokenizer_vocab` 0 takes the recipe's
// vocabulary size. Warns above 80%. `tarn config` and `tarn train` both call it.
void check_memory(const Recipe& recipe, int64_t tokenizer_vocab = 0);

// Keys the denoising noise of validation, test and `tarn eval` / `denoise` data: apart from the
// training noise, and fixed, so that scores of different runs and commands compare.
constexpr uint64_t kEvalNoiseSeed = 0x5eed0e7a1ULL;

// A dataset of the recipe's kind (denoising or pairs) over `path`. `noise_seed` keys the
// denoising noise (training: the recipe seed; evaluation: a fixed seed so scores repeat).
std::unique_ptr<Dataset> open_dataset(const Recipe& recipe, const Tokenizer& tok, const std::string& path,
                                      uint64_t noise_seed, const char* role);

}  // namespace tarn::app
