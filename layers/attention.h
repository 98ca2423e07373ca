#pragma once
// Multi-head attention as HF's BartAttention (parameters k_proj, v_proj, q_proj, out_proj, in
// that order) around one attention kind (layers/attention/kind.h): the module projects, hands
// the projections to its kind, and projects the kind's context back with out_proj. Which kinds
// there are and what each computes is in layers/attention/ (softmax.h, linear.h with
// feature_map.h, aligned.h, delta.h, hybrid.h) and docs/design.md, "Attention kinds"; the
// module holds its kind's layer, built by name (layers/attention/registry.h), and never asks
// which kind it is. Self-attention passes the same tensor as query and key/value;
// cross-attention passes the encoder output as key/value.
// Shapes: hidden states (B, N, D); inside a kind, (B, H, N, dh) with D = H * dh.
// Key padding masks are B*Nk bytes, row-major (b, j), nonzero = padding; empty = no padding.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/module.h"
#include "layers/attention/common.h"
#include "layers/attention/kind.h"
#include "layers/config.h"
#include "layers/dropout.h"
#include "layers/linear.h"

namespace tarn {

// A module's decoding state: its kind's (layers/attention/kind.h), typed by the kind. Copying a
// cache aliases its tensors (a step replaces them or, for linear attention, updates them in
// place): use clone() for an independent copy.
class AttentionCache {
 public:
  AttentionCache() = default;
  explicit AttentionCache(std::unique_ptr<DecodeState> state) : state_(std::move(state)) {}
  AttentionCache(const AttentionCache& other) : state_(other.state_ ? other.state_->copy() : nullptr) {}
  AttentionCache& operator=(const AttentionCache& other) {
    state_ = other.state_ ? other.state_->copy() : nullptr;
    return *this;
  }
  AttentionCache(AttentionCache&&) = default;
  AttentionCache& operator=(AttentionCache&&) = default;

  bool defined() const { return state_ != nullptr; }
  int64_t length() const { return state_ ? state_->length : 0; }  // keys seen
  DecodeState& state() { return *state_; }
  const DecodeState& state() const { return *state_; }
  // The kind's own state type (e.g. LinearState); asserts that it is that type.
  template <typename S>
  const S& as() const {
    const S* s = dynamic_cast<const S*>(state_.get());
    TARN_ASSERT(s, "attention cache: not the state of the kind asked for");
    return *s;
  }

 private:
  std::unique_ptr<DecodeState> state_;
};

// Rows of every tensor in `cache` reordered along the batch axis: row i <- row indices[i]
// (beam search). indices may repeat rows and change the batch size.
void reorder(AttentionCache& cache, const std::vector<int64_t>& indices);
AttentionCache clone(const AttentionCache& cache);

// Attention transfer (linearizing, docs/design.md section 8): while a module is given one, its
// forward() also runs softmax attention on the same projections (the teacher, without autograd),
// appends the mean squared difference of its own output from the teacher's as a term, and returns
// the teacher's output, so that every layer sees what the softmax model would feed it and each
// term trains only its own module's parameters (Hedgehog, Zhang et al. 2024; LoLCATs, 2024).
struct AttentionTransfer {
  struct Term {
    std::string name;  // the module, "model.encoder.layers.0.self_attn"
    Tensor loss;       // shape (): mean over (B, N, D) of (own output - teacher's)^2
  };
  std::vector<Term> terms;  // in forward order, one per non-softmax module per forward
};

class MultiHeadAttention : public Module {
 public:
  // `cross`: the module attends from the decoder to the encoder; `max_keys`: the longest key
  // sequence it will see (0: unknown; AttentionShape::max_keys).
  MultiHeadAttention(int64_t d_model, int64_t heads, const AttentionConfig& config, bool causal,
                     float attention_dropout, ParamInit& init, DropoutStreams& dropout, bool cross = false,
                     int64_t max_keys = 0);
  ~MultiHeadAttention() override;

  // query: (B, Nq, D); key_value: (B, Nk, D); key_padding: (B, Nk) flags or empty -> (B, Nq, D).
  Tensor forward(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding = {}) const;

  // Attention transfer (above); null stops it. A softmax module records nothing.
  void set_transfer(AttentionTransfer* transfer, std::string name) {
    transfer_ = transfer;
    transfer_name_ = std::move(name);
  }
  // Softmax attention of this module's projections, q scaled by head_dim^-1/2 as HF does, no
  // dropout: what the module computed before its kind was replaced.
  Tensor softmax_teacher(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding) const;

  // Decoding (no autograd). A self-attention cache for `batch` rows before the first token.
  AttentionCache start_self(int64_t batch) const;
  // One new position of self-attention: query (B, 1, D) is also the new key/value; appends it
  // to the cache and returns (B, 1, D), equal to row t of the causal forward.
  Tensor step_self(const Tensor& query, AttentionCache& cache) const;
  // Cross-attention: what the kind keeps of the encoder output, once per source batch.
  AttentionCache precompute_cross(const Tensor& key_value, const PaddingMask& key_padding) const;
  // query (B, 1, D) against a precomputed cross cache -> (B, 1, D).
  // position: the target position of the query row (the kinds that read around it need it).
  Tensor step_cross(const Tensor& query, const AttentionCache& cache, int64_t position = -1) const;

  // FAVOR+ only (null otherwise): the projection, its RNG position and its redraw counter.
  // A checkpoint keeps `w` (also a buffer), `rng` and `steps`.
  FavorProjection* favor() { return kind_->favor(); }
  const FavorProjection* favor() const { return kind_->favor(); }

  const AttentionConfig& config() const { return config_; }
  int64_t heads() const { return shape_.heads; }
  int64_t head_dim() const { return shape_.head_dim; }
  bool causal() const { return shape_.causal; }

  // Declared in HF's order, which fixes named_parameters()' order.
  Linear k_proj, v_proj, q_proj, out_proj;

 private:
  class Site;  // what the kind is built with and registers its parameters on
  Tensor own_forward(const Tensor& query, const Tensor& key_value, const PaddingMask& key_padding) const;

  AttentionConfig config_;
  AttentionShape shape_;
  float attention_dropout_;
  DropoutStreams* dropout_;
  AttentionTransfer* transfer_ = nullptr;
  std::string transfer_name_;
  std::unique_ptr<Site> site_;
  std::unique_ptr<AttentionKindLayer> kind_;
};

}  // namespace tarn
