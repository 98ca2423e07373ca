#pragma once
// A reusable finite-difference gradient checker for ops (Flashlight's habit): every op with a
// backward is checked through it.
//
//   auto r = gradients_match([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x});
//   EXPECT_TRUE(r);
//
// The scalar loss is L = sum(w * fn(inputs)) with fixed random weights w (so that every output
// element matters differently). For each input that requires grad, autograd's dL/dx is compared
// with central differences (L(x + eps) - L(x - eps)) / 2 eps, L accumulated in double.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "framework/tensor.h"

namespace tarn::testing {

struct GradcheckOptions {
  double eps = 1e-2;   // f32 inputs: large enough that rounding noise stays below atol
  double atol = 2e-3;
  double rtol = 2e-2;
  uint64_t seed = 1234;
  int64_t max_checked_per_input = 200;  // drawn at random (seeded) when the input is bigger
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

::testing::AssertionResult gradients_match(const OpFn& fn, const std::vector<Tensor>& inputs,
                                           const GradcheckOptions& opt = {});

// A tensor of the given shape with values uniform in [lo, hi), from a seeded Philox stream.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// max |a - b| / max(max |b|, floor): one number to compare an op against its reference.
double relative_error(const std::vector<float>& a, const std::vector<double>& b, double floor = 1e-6);

}  // namespace tarn::testing
