#pragma once
// Kinds delta and gated: the gated delta rule (Gated DeltaNet) and its variant without the
// erase, around q, k and v as layers/delta_rule_block.h describes (convolutions, normalised rows,
// beta and alpha gates, output norm; its parameters in the "delta" submodule). Causal
// self-attention is the scan read at every token; the encoder's bidirectional self-attention
// sums a forward and a reverse scan (each token is read by both); cross-attention writes the
// encoder output into one state per (batch, head) with the scan and every target position
// reads it: o = S^T q. Decoding keeps S (B, H, dh, dh) and, in self-attention, the last
// conv_size - 1 projected inputs of q, k and v for the convolutions.
#include <cstdint>
#include <memory>

#include "framework/io/json.h"
#include "framework/ops/delta_rule.h"
#include "layers/attention/kind.h"
#include "layers/delta_rule_block.h"

namespace tarn {

struct DeltaState : DecodeStateOf<DeltaState> {
  Tensor state;                   // S (B, H, dh, dh)
  Tensor q_tail, k_tail, v_tail;  // self-attention: the convolutions' last inputs (B, taps - 1, D)
  std::vector<Tensor*> tensors() override { return {&state, &q_tail, &k_tail, &v_tail}; }
};

class DeltaAttention : public AttentionKindLayer {
 public:
  // erases: the delta rule (kind delta, hybrid over delta); false: gated (kind gated).
  DeltaAttention(AttentionSite& site, bool erases);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;

  // Estimates: the block's beta, alpha and gate projections, decay rates, conv_size taps of q, k
  // and v (cross-attention: k and v) and the output norm. Decoding keeps S (H, dh, dh) and, in
  // self-attention, the convolutions' last conv_size - 1 projections of q, k and v while each
  // step convolves a window of conv_size rows into as many.
  static double parameters(const AttentionConfig& a, const AttentionSizes& s);
  static double decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens);
  // The export: conv_size and chunk.
  static void export_settings(const AttentionConfig& a, json::Json& o) {
    o["conv_size"] = a.conv_size;
    o["chunk"] = a.chunk;
  }

 private:
  // The writer's convolved, normalised k and v (B, H, N, dh), with beta and alpha (B, H, N).
  struct Write {
    Tensor k, v, beta, alpha;
  };
  Write write(const AttentionInputs& in) const;
  // The scans' options: this module's chunk and erase, its precision (bf16 kernels where the
  // device has them, framework/ops/delta_rule.h), `reverse` for the backward half of a
  // bidirectional layer.
  DeltaRuleOptions options(bool reverse) const;

  const AttentionSite& site_;
  bool erases_;
  std::unique_ptr<DeltaRuleBlock> block_;  // registered as "delta"
};

}  // namespace tarn
