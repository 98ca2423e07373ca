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
// A tree of landmarks (route_root > 0): the landmarks are themselves cut into chunks of
// route_chunk and averaged, level after level, as many levels as the longest source the model
// takes (its learned positions) needs for its top level to hold at most route_root. A target
// position then scores the top level's landmarks (compressed read and choice), and at each level
// below only the children of the route_beam it chose there (a softmax read of them, and the
// route_beam best of them), down to the keys, of which it reads the route_top best chunks
// (route_beam 0: route_top at every level). The compressed read is the mean of the levels'
// reads. The depth is the model's, not the batch's: a row reads the same whatever the padding.
// With one level (route_root 0, or a model whose longest source is at most route_root chunks)
// this is the flat read above.
//
// Cost per target position: flat, N_src / route_chunk landmarks and route_top x route_chunk keys
// (the landmark read is O(N_tgt N_src / route_chunk), as NSA's compressed branch); with a tree,
// at most route_root + levels x route_beam x route_chunk, O(log N_src). The landmarks, the choices
// and the reads are framework/ops/chunk_attention.h's ops, on the CPU and on CUDA alike, with no
// host round trip (the reads below the top in f32 in every precision). Decoding keeps the
// source's keys, values and every level's landmarks.
#include <cstdint>
#include <vector>

#include "framework/io/json.h"
#include "layers/attention/common.h"

namespace tarn {

// What every target position reads of one source: its keys and values (B, H, Nk, dh) and their
// padding (B, Nk, 1 = padded; undefined when none); the levels of landmarks, level 1 (the keys'
// chunk means) first, each keys and values (B, H, n_l, dh) and its chunks of nothing visible
// (B, n_l: 1, else 0); and the top level's mask (B, 1, 1, n_top: -1e9 or 0).
struct RoutedSource : DecodeStateOf<RoutedSource> {
  Tensor key, value, key_padding;
  std::vector<Tensor> landmark_key, landmark_value, landmark_empty;
  Tensor top_bias;
  std::vector<Tensor*> tensors() override {
    std::vector<Tensor*> all = {&key, &value, &key_padding, &top_bias};
    for (std::vector<Tensor>* level : {&landmark_key, &landmark_value, &landmark_empty})
      for (Tensor& t : *level) all.push_back(&t);
    return all;
  }
};

// The source side of routed attention, keys and values (B, H, Nk, dh) already split by head and
// their padding (B, Nk, 1 = padded) or undefined, in chunks of `chunk` positions, with `levels`
// levels of landmarks (1: the flat read).
RoutedSource routed_source(const Tensor& key, const Tensor& value, const Tensor& key_padding, int64_t chunk,
                           int64_t levels = 1);

// The levels of landmarks a source of up to `max_keys` positions needs for the top one to hold
// at most `root` (route_root) in chunks of `chunk`: 1 when root is 0 or max_keys unknown (0).
int64_t routed_levels(int64_t chunk, int64_t root, int64_t max_keys);

// Both reads of q (B, H, Nq, dh) over `src`, each (B, H, Nq, dh), before the gate mixes them:
// the compressed read (softmax over the top level's landmarks, and with a tree the mean of it and
// the reads of the children chosen below), and softmax over the keys of the `top` best chunks
// (fewer when the source has fewer); with a tree, the `beam` best are chosen at each level above
// the keys' chunks. `precision` is the landmark GEMMs'; the selected read is f32.
struct RoutedReads {
  Tensor selected, compressed;
};
RoutedReads routed_reads(const Tensor& q, const RoutedSource& src, int64_t chunk, int64_t top, int64_t beam,
                         float scale, Precision precision);

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
  int64_t chunk_, top_, beam_, levels_;
  float scaling_;
  HeadGate gate_;
};

}  // namespace tarn
