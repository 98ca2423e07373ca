#pragma once
// Reproducible, resumable dropout for a whole model. Every dropout call that really drops
// (training and p > 0) takes the next Philox stream: stream = counter++, mask = f(seed, stream,
// element) (framework/ops/nn.h). The number of such calls per step is fixed by the model and
// the batch shapes, so (seed, counter) is the whole state: a checkpoint stores it and a resumed
// run draws the same masks as an uninterrupted one. Data-parallel ranks should use different
// seeds (e.g. seed + rank) so that their masks differ.
#include <cstdint>

#include "framework/tensor.h"

namespace tarn {

struct DropoutState {
  uint64_t seed = 0;
  uint64_t counter = 0;  // streams consumed so far
};

class DropoutStreams {
 public:
  explicit DropoutStreams(uint64_t seed = 0) { state_.seed = seed; }

  // Inverted dropout of x with probability p; identity (and no stream used) unless training.
  Tensor apply(const Tensor& x, float p, bool training);

  const DropoutState& state() const { return state_; }
  void set_state(const DropoutState& s) { state_ = s; }

 private:
  DropoutState state_;
};

}  // namespace tarn
