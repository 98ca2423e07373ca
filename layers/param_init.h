#pragma once
// Parameter initialisation while a layer is constructed, as HuggingFace's BartPretrainedModel
// _init_weights does: Linear and Embedding weights ~ N(0, std), biases 0, LayerNorm weight 1
// and bias 0. Every tensor draws from its own Philox stream (seed, stream), streams numbered in
// construction order, so a layer built with the same seed is the same layer.
//
// A whole model is initialised afterwards by name (framework/init.h bart_init_); it builds its
// layers with ParamInit::deferred(seed), which only allocates (zeros) and draws nothing.
#include <cstdint>

#include "framework/tensor.h"

namespace tarn {

class ParamInit {
 public:
  explicit ParamInit(uint64_t seed, float std = 0.02f) : seed_(seed), std_(std) {}
  // Allocates only; seed() and next_stream() still serve draws that are not weights (FAVOR+).
  static ParamInit deferred(uint64_t seed) {
    ParamInit p(seed, 0.0f);
    p.deferred_ = true;
    return p;
  }

  Tensor normal(const Shape& shape);  // N(0, std), the next stream (zeros when deferred)
  Tensor zeros(const Shape& shape) { return Tensor::zeros(shape); }
  Tensor ones(const Shape& shape) { return Tensor::ones(shape); }

  uint64_t seed() const { return seed_; }
  float std() const { return std_; }
  uint64_t next_stream() { return stream_++; }

 private:
  uint64_t seed_;
  float std_;
  uint64_t stream_ = 0;
  bool deferred_ = false;
};

}  // namespace tarn
