#pragma once
// Helpers of the bf16 conformance tests (tests/cuda/conformance_linear_attention_bf16*_test.cpp):
// host-side conversions between f32 and tarn::bf16, and bf16-rounded inputs, so that the CPU
// reference in f32 sees exactly the values the bf16 kernels read.
#include <cstdint>
#include <vector>

#include "kernels/emu/bf16.h"
#include "tests/cuda/conformance_util.h"

namespace tarn::cuda_testing {

// Each value rounded to the nearest bf16 (and kept as f32).
inline std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_round(x);
  return v;
}

inline std::vector<float> RoundedRandom(size_t n, float lo, float hi, uint32_t seed) {
  return Rounded(Random(n, lo, hi, seed));
}

inline std::vector<bf16> ToBf16(const std::vector<float>& v) {
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_from_float(v[i]);
  return h;
}

inline std::vector<float> ToFloat(const std::vector<bf16>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_float(h[i]);
  return v;
}

// A quiet NaN in bf16: outputs start as it, so that an element never written shows.
constexpr bf16 kBf16Nan{0x7fc0};

}  // namespace tarn::cuda_testing
