#pragma once
// One attention kind, in one place (docs/design.md, "Attention kinds"). MultiHeadAttention
// (layers/attention.h) owns the four projections every kind shares, HF's k_proj, v_proj, q_proj
// and out_proj; everything between them is the kind's: its own parameters, the training
// forward (self, causal or bidirectional, and cross), what cross-attention precomputes from
// the source, and the decoding state with its one-token step. Each kind implements
// AttentionKindLayer in its own files under layers/attention/ and is found by name in the
// registry (layers/attention/registry.h); the module never asks which kind it holds.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/attention_config.h"
#include "framework/module.h"
#include "framework/ops/attention.h"
#include "framework/tensor.h"
#include "layers/dropout.h"
#include "layers/param_init.h"

namespace tarn {

using PaddingMask = std::vector<uint8_t>;  // (B, N) row-major, nonzero = padding; empty = none

// The layer's inputs as a kind reads them: the query input x (B, Nq, D), the key/value input
// (B, Nk, D; x itself in self-attention), their projections q = q_proj(x), k = k_proj(source),
// v = v_proj(source) (B, N, D), and the keys' padding. Undefined where a call has none
// (precompute_cross has no query side).
struct AttentionInputs {
  Tensor x, source;
  Tensor q, k, v;
  const PaddingMask* pad = nullptr;
  const PaddingMask& padding() const;  // *pad, or an empty mask
};

// What a kind keeps between decoding steps, typed by the kind (e.g. linear attention's S',
// softmax's keys and values). Copying a state object aliases its tensors; clone() copies them.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  // Every tensor whose first axis is the batch, for reorder() and clone().
  virtual std::vector<Tensor*> tensors() = 0;
  virtual std::unique_ptr<DecodeState> copy() const = 0;  // aliases the tensors
  int64_t length = 0;  // keys seen (self-attention: positions decoded so far)
};

// The copy() every state with copyable members has.
template <typename Derived>
class DecodeStateOf : public DecodeState {
 public:
  std::unique_ptr<DecodeState> copy() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// The module's sizes and role.
struct AttentionShape {
  int64_t d_model = 0, heads = 0, head_dim = 0;
  bool causal = false;  // decoder self-attention
  bool cross = false;   // attends from the decoder to the encoder output
  // The longest key sequence the model takes (cross-attention: the encoder's learned positions),
  // or 0 where unknown; routed attention sizes its tree of landmarks for it.
  int64_t max_keys = 0;
};

// A module's sizes for the estimates made from the settings alone, before or instead of
// building it (memory checks, parameter counts): doubles, so that a schema-maximal value cannot
// wrap.
struct AttentionSizes {
  double d_model = 0, heads = 1;
  bool cross = false;
  double head_dim() const { return d_model / (heads < 1 ? 1.0 : heads); }
};

// The batch a training estimate is for: tokens per micro-batch, the longest sequence the data
// allows, the keys each query of this module sees at most, and whether attention dropout is on.
struct AttentionBatch {
  double tokens = 0, longest = 0, keys = 0;
  bool dropout = false;
};
// What one module adds to a training step's memory beyond the projections and layer activations
// the model counts: what the tape keeps of it per micro-batch, and the largest workspace it
// holds while it runs (counted once: modules run one at a time).
struct AttentionTrainingBytes {
  double kept = 0, workspace = 0;
};

// What a kind is built with: its settings, the module's shape, the model's initialiser and
// dropout streams, and the module it lives in, on which it registers its parameters (under the
// module's own names, as HF's checkpoints and tarn's exports spell them) and whose training()
// and precision() it reads.
class AttentionSite {
 public:
  virtual ~AttentionSite() = default;
  virtual const AttentionConfig& config() const = 0;
  virtual const AttentionShape& shape() const = 0;
  virtual ParamInit& init() const = 0;
  virtual DropoutStreams& dropout() const = 0;
  virtual float attention_dropout() const = 0;
  virtual bool training() const = 0;
  virtual Precision precision() const = 0;
  virtual Device device() const = 0;  // where the module's parameters are
  // Registration, in the order the kind calls them (the order fixes the parameters' order in
  // checkpoints, the optimizer's walk and the initialiser's draws).
  virtual void add_module(const std::string& name, Module& m) = 0;
  virtual void add_parameter(const std::string& name, Tensor& t, bool keep_initial_value) = 0;
  virtual void add_buffer(const std::string& name, Tensor& t) = 0;
};

class AttentionKindLayer {
 public:
  virtual ~AttentionKindLayer() = default;

  // Training and evaluation: the context (B, Nq, D) that out_proj turns into the layer's output.
  virtual Tensor forward(const AttentionInputs& in) const = 0;

  // Decoding, without autograd. Self-attention: the state before the first token, then one
  // position (in: x, q, k, v of shape (B, 1, D)) -> its context (B, 1, D), equal to row t of the
  // causal forward; the state advances.
  virtual std::unique_ptr<DecodeState> start_self(int64_t batch) const = 0;
  virtual Tensor step_self(const AttentionInputs& in, DecodeState& state) const = 0;
  // Cross-attention: what every target position reads of the source (in: source, k, v, pad),
  // once per source batch; then target rows (in: x, q) at `position` (-1: unknown; the kinds
  // that read around the position need one row at a known position).
  virtual std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const = 0;
  virtual Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const = 0;

  // Attention transfer (docs/design.md section 8) trains a kind to match softmax attention;
  // softmax attention itself has nothing to learn there.
  virtual bool learns_from_softmax_teacher() const { return true; }
  // FAVOR+'s random projection, which a checkpoint keeps with its RNG; null for every other map.
  virtual FavorProjection* favor() { return nullptr; }
};

// The module's shape helpers every kind uses: (B, N, D) <-> (B, H, N, dh).
Tensor split_heads(const Tensor& x, const AttentionShape& s);
Tensor merge_heads(const Tensor& x);

}  // namespace tarn
