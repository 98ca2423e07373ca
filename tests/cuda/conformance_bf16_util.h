#pragma once
// Helpers of the bf16 conformance tests (tests/cuda/conformance_*_bf16*_test.cpp): host-side
// conversions between f32 and tarn::bf16, bf16-rounded inputs, so that the CPU reference in f32
// sees exactly the values the bf16 kernels read, and the comparison with a tolerance derived
// from how far a bf16-sized jitter of the inputs moves the reference.
#include <algorithm>
#include <cmath>
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

// got within 1e-2 |want| + 1e-2 rms(want) + kNoiseFloors * max |jittered - want|, where
// jittered is the reference on inputs moved by about one bf16 rounding: the kernel's bf16
// roundings may cost what such a jitter costs, a few times over, and a dropped term or a
// misplaced tile costs far more.
constexpr float kBf16Rtol = 1e-2f;
constexpr float kBf16RmsFraction = 1e-2f;
constexpr float kNoiseFloors = 3.0f;

inline ::testing::AssertionResult Bf16Close(const std::vector<float>& got, const std::vector<float>& want,
                                     const std::vector<float>& jittered) {
  double sq = 0.0, noise = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    sq += static_cast<double>(want[i]) * want[i];
    noise = std::max(noise, std::fabs(static_cast<double>(jittered[i]) - want[i]));
  }
  const double rms = want.empty() ? 0.0 : std::sqrt(sq / want.size());
  const double atol = kBf16RmsFraction * rms + kNoiseFloors * noise;
  ::testing::AssertionResult r = AllClose(got, want, kBf16Rtol, static_cast<float>(atol) + 1e-30f);
  if (!r) {
    double worst = 0.0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    r << "largest error " << worst << " = " << worst / rms << " rms(want) = " << worst / noise << " noise\n";
  }
  return r;
}

}  // namespace tarn::cuda_testing
