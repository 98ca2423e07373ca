#pragma once
// Kind routed (issue 53): cross-attention that finds its source token by content wherever it
// sits, as Native Sparse Attention's compressed and selected branches do (Yuan et al. 2025).
// The source is cut into chunks of route_chunk positions; each chunk's landmark key and value are
// the means of its unpadded keys and values. Per head and target position:
//   compressed: softmax over the landmarks, q L^T / sqrt(dh), read of the landmark values;
//   selected:   softmax over the keys of the route_top chunks whose landmark scores are highest
//               (ties to the earlier chunk), read of their values;
// mixed by a learned gate g = σ(x W^T + b) ("route_gate", HeadGate): g selected + (1 - g)
// compressed. The choice of chunks has no gradient; the landmarks learn through the compressed
// read, which scores them as the choice does.
//
// Cost: per target position N_src / route_chunk landmarks and route_top x route_chunk keys. The
// landmarks, the choice and the selected read are framework/ops/chunk_attention.h's ops, on the
// CPU and on CUDA alike, with no host round trip: the selected read touches only the chosen keys
// (O(N_tgt route_top route_chunk dh), in f32 in every precision); the landmark read is
// O(N_tgt N_src / route_chunk), as NSA's compressed branch. Decoding keeps the source's keys,
// values and landmarks.
#include <cstdint>
#include <vector>

#include "framework/io/json.h"
#include "layers/attention/common.h"

namespace tarn {

// What every target position reads of one source: its keys and values (B, H, Nk, dh), the
// landmarks (B, H, Nc, dh), the chunks of padding only (B, Nc: 1, else 0) and as the landmarks'
// mask (B, 1, 1, Nc: -1e9 or 0), and the keys' padding (B, Nk, 1 = padded; undefined when none).
struct RoutedSource : DecodeStateOf<RoutedSource> {
  Tensor key, value, landmark_key, landmark_value, chunk_empty, landmark_bias, key_padding;
  std::vector<Tensor*> tensors() override {
    return {&key, &value, &landmark_key, &landmark_value, &chunk_empty, &landmark_bias, &key_padding};
  }
};

// The source side of routed attention, keys and values (B, H, Nk, dh) already split by head and
// their padding (B, Nk, 1 = padded) or undefined, in chunks of `chunk` positions.
RoutedSource routed_source(const Tensor& key, const Tensor& value, const Tensor& key_padding, int64_t chunk);

// Both reads of q (B, H, Nq, dh) over `src`, each (B, H, Nq, dh), before the gate mixes them:
// softmax over the landmarks, and softmax over the keys of the `top` best chunks (fewer when the
// source has fewer). `precision` is the landmark GEMMs'; the selected read is f32.
struct RoutedReads {
  Tensor selected, compressed;
};
RoutedReads routed_reads(const Tensor& q, const RoutedSource& src, int64_t chunk, int64_t top, float scale,
                         Precision precision);

class RoutedAttention : public AttentionKindLayer {
 public:
  explicit RoutedAttention(AttentionSite& site);

  Tensor forward(const AttentionInputs& in) const override;
  std::unique_ptr<DecodeState> start_self(int64_t batch) const override;  // refused: cross-attention only
  Tensor step_self(const AttentionInputs& in, DecodeState& state) const override;
  std::unique_ptr<DecodeState> precompute_cross(const AttentionInputs& in) const override;
  Tensor step_cross(const AttentionInputs& in, const DecodeState& state, int64_t position) const override;

  // Estimates: the gate's (H, D) weight and H bias; decoding keeps keys, values and landmarks;
  // training keeps at least the landmark scores and their softmax (2 x 4 bytes per head, query
  // and chunk), a lower bound as every kind's.
  static double parameters(const AttentionConfig& a, const AttentionSizes& s);
  static double decode_state_bytes(const AttentionConfig& a, const AttentionSizes& s, double tokens);
  static AttentionTrainingBytes training_bytes(const AttentionConfig& a, const AttentionSizes& s, const AttentionBatch& b);
  static void export_settings(const AttentionConfig& a, json::Json& o);

 private:
  // The source's keys, values and padding (k, v (B, Nk, D)) -> its RoutedSource.
  RoutedSource prepare(const Tensor& k, const Tensor& v, const PaddingMask& pad) const;
  // q (B, H, Nq, dh) over `src` -> the mixed context (B, Nq, D).
  Tensor read(const Tensor& q, const RoutedSource& src, const Tensor& x) const;

  const AttentionSite& site_;
  int64_t chunk_, top_;
  float scaling_;
  HeadGate gate_;
};

}  // namespace tarn
