#pragma once
// Parameter initialisers, as torch.nn.init and HuggingFace's BART _init_weights.
//
// Every random initialiser draws from `rng` exactly as consecutive calls to rng.uniform() /
// rng.normal() would (element i of a uniform fill takes output offset+i, of a normal fill
// outputs offset+2i and offset+2i+1), then advances rng past what it used. The draws are made
// in parallel through philox_at, so the values depend on (seed, stream, offset) only, never on
// the thread count. Tensors on a GPU are filled on the host and copied over.
#include <cstdint>

#include "framework/module.h"
#include "framework/rng.h"
#include "framework/tensor.h"

namespace tarn::init {

void normal_(Tensor& t, float mean, float std, Philox& rng);
void uniform_(Tensor& t, float lo, float hi, Philox& rng);  // in (lo, hi]
void zeros_(Tensor& t);
void ones_(Tensor& t);

// PyTorch's fans: fan_in = size(1) * receptive field, fan_out = size(0) * receptive field,
// receptive field = product of the extents after the first two. Needs dim() >= 2.
struct Fans {
  int64_t fan_in, fan_out;
};
Fans fans(const Tensor& t);

// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio).
void xavier_uniform_(Tensor& t, Philox& rng, float gain = 1.0f);

// U(-b, b), b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)) (He et al., leaky ReLU
// slope a, fan_in mode). nn.Linear's default weight init is a = sqrt(5), i.e. b = 1/sqrt(fan_in).
constexpr float kLinearDefaultA = 2.2360679775f;  // sqrt(5)
void kaiming_uniform_(Tensor& t, Philox& rng, float a = 0.0f);

// nn.Linear.reset_parameters: weight (out, in) ~ kaiming_uniform(a = sqrt 5), bias (out) ~
// U(-1/sqrt(in), 1/sqrt(in)). `bias` may be undefined.
void linear_default_(Tensor& weight, Tensor& bias, Philox& rng);

// HuggingFace BART (config.init_std = 0.02): Linear and Embedding weights ~ N(0, std), biases
// zero, an embedding's padding row zero.
constexpr float kBartInitStd = 0.02f;
void bart_linear_(Tensor& weight, Tensor& bias, Philox& rng, float std = kBartInitStd);
void bart_embedding_(Tensor& weight, Philox& rng, int64_t padding_idx = -1, float std = kBartInitStd);

// BART's init over a whole model by HF parameter name, in registration order:
//   *layer_norm*.weight / *layernorm*.weight       -> 1
//   *bias (incl. final_logits_bias)                -> 0
//   *shared.weight, *embed_tokens.weight           -> N(0, std), row padding_idx zero
//   any other weight (Linear, embed_positions)     -> N(0, std)
struct BartInitOptions {
  float std = kBartInitStd;
  int64_t padding_idx = 1;  // <pad>
};
void bart_init_(const Module& model, Philox& rng, const BartInitOptions& opt = {});

}  // namespace tarn::init
