#include "layers/param_init.h"

#include "framework/rng.h"

namespace tarn {

Tensor ParamInit::normal(const Shape& shape) {
  if (deferred_) return Tensor::zeros(shape);
  Tensor t = Tensor::empty(shape);
  Philox rng(seed_, next_stream());
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std_ * rng.normal();
  return t;
}

}  // namespace tarn
