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
#include "kernels/emu/emu.h"
#include "tests/cuda/tolerance.h"

namespace tarn::testing {

inline Device emulated_cuda() {
  static const bool installed = [] {
    const char* want = std::getenv("TARN_TEST_CUDA");
    const bool force_emulator = want && std::string(want) == "emulated";
    if (force_emulator || kernels::cuda_device_count() == 0) {
      kernels::install_cuda_backend(&kernels::cuda_emu::backend());
      // One worker runs every block: these tests check the model, not races between blocks
      // (the conformance suites in tests/cuda look for those), and a step's thousands of
      // launches then hand nothing to other threads, which a busy shared machine makes slow.
      if (!std::getenv("TARN_EMU_WORKERS")) emu::set_workers(1);
    }
    return true;
  }();
  (void)installed;
  return Device::cuda(0);
}

// Whether the device's GEMMs round their f32 operands to tf32: the hardware backend with
// TARN_ALLOW_TF32=1 (kernels/cuda/gemm.cu); never on the emulator.
inline bool device_gemms_in_tf32() {
  emulated_cuda();  // the backend this asks about: installed first when a test starts here
  return std::string(kernels::cuda_backend().name) != "cuda (emulated)" && cuda_testing::Tf32Allowed();
}

// The bound on max_relative_difference (below) of an op on cuda:0 against the CPU, forward and
// every gradient, from the precision both compute in (tests/cuda/tolerance.h): each result sums
// at most n terms (every product and function value on its path counted), each side within
// gamma_n(2^-24) of the terms' magnitude plus, per math function on the path, its error (CUDA's
// 2 ulps, the CPU's within the same). That magnitude is at most n times the largest term, which
// on these small random inputs is no larger than the largest result: n (2 gamma_n + 4 ulps f).
// An op that multiplies matrices (gemm) on a GPU with tf32 GEMMs adds n * 2 * 2^-11.
inline double op_tolerance(int64_t n, int functions = 0, bool gemm = false) {
  using namespace cuda_testing;
  const double tf32 = gemm && device_gemms_in_tf32() ? Gamma(2, kTf32) : 0.0;
  return static_cast<double>(n) * (2 * Gamma(n, kF32) + 2 * functions * Ulps(2) + tf32);
}

// The roundings on the longest forward path of a BART (layers/bart.h) whose sequences have at
// most n_src and n_tgt positions, each reduction counted by its length (each side is within
// gamma_P of the magnitudes on it, tests/cuda/tolerance.h): the embeddings' layer norm (2 d:
// mean, then variance); per encoder layer the q (or k, v) and output projections (d each), the
// attention (head dim, keys, head dim), two layer norms and the FFN (d, then ffn); per decoder
// layer the same with two attentions and three layer norms; the final logits (d), the loss's
// log-sum-exp over the vocabulary and mean over the `tokens` labels.
inline int64_t bart_forward_path(int64_t d, int64_t heads, int64_t ffn, int64_t encoder_layers,
                                 int64_t decoder_layers, int64_t vocab, int64_t n_src, int64_t n_tgt,
                                 int64_t tokens) {
  const int64_t head = d / heads;
  const int64_t encoder = 2 * d + (2 * head + n_src) + 2 * (2 * d) + d + ffn;
  const int64_t decoder = 4 * d + (2 * head + n_tgt) + (2 * head + n_src) + 3 * (2 * d) + d + ffn;
  return 2 * (2 * d) + encoder_layers * encoder + decoder_layers * decoder + d + vocab + tokens;
}

// The roundings a delta or gated attention adds to a result's path (kernels/delta_rule.h,
// layers/delta_rule_block.h), head dimension `head`, n tokens, `taps` of convolution: the state
// after n writes went through n updates of head + 4 roundings each (u = S^T k, w, the update),
// the readout head more; the convolution taps, q and k's unit rows head + 3, beta and alpha's
// gates about 10, the output's RMS norm head + 4 and its gate 5.
inline int64_t delta_attention_path(int64_t head, int64_t n, int64_t taps) {
  return n * (head + 4) + head + taps + (head + 3) + 10 + (head + 4) + 5;
}

// The GEMMs on that path (each adds 2 * 2^-11 of its terms where device_gemms_in_tf32()):
// 2 projections and 2 FFN layers per encoder layer, 4 and 2 per decoder layer, the logits.
inline int64_t bart_gemms_on_path(int64_t encoder_layers, int64_t decoder_layers) {
  return 4 * encoder_layers + 6 * decoder_layers + 1;
}

// The relative bound on a BART result whose path has `path` roundings and `gemms` GEMMs: both
// sides' gamma_path(2^-24), and tf32's operand roundings on the device where it applies.
inline double bart_tolerance(int64_t path, int64_t gemms) {
  using namespace cuda_testing;
  return 2 * Gamma(path, kF32) + (device_gemms_in_tf32() ? gemms * Gamma(2, kTf32) : 0.0);
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
