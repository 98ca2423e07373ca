#pragma once
// The CUDA device these tests run on: the emulated CUDA backend (cuda:0 tensors are host
// memory run through the kernels/cuda/*.cu kernels built against the emulator, kernels/
// backend.h), installed once before the first CUDA tensor by every test that calls
// emulated_cuda(). On a machine with a GPU and a CUDA build the real backend is used instead
// (the same tests then check the hardware), unless TARN_TEST_CUDA=emulated asks for the
// emulator anyway.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/tensor.h"
#include "kernels/backend.h"

namespace tarn::testing {

inline Device emulated_cuda() {
  static const bool installed = [] {
    const char* want = std::getenv("TARN_TEST_CUDA");
    const bool force_emulator = want && std::string(want) == "emulated";
    if (force_emulator || kernels::cuda_device_count() == 0)
      kernels::install_cuda_backend(&kernels::cuda_emu::backend());
    return true;
  }();
  (void)installed;
  return Device::cuda(0);
}

// max |a - b| / max(max |b|, floor).
inline double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b,
                                      double floor = 1e-6) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0, scale = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

}  // namespace tarn::testing
