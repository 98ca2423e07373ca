#pragma once
// Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), laid out as cuRAND's
// curand_init(seed, subsequence, offset) so that the CPU and CUDA backends draw the same
// stream for the same (seed, stream, offset):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (block low, block high, stream low, stream high), one block = 4 outputs.
// A generator's whole state is (seed, stream, offset): checkpoints store those three numbers.
#include <array>
#include <cstdint>

namespace tarn {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// One application of the ten-round bijection.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// uint32 -> float in (0, 1], as curand_uniform does (never 0, so log() is safe).
inline float uint_to_uniform(uint32_t x) {
  constexpr float kInv2Pow32 = 2.3283064e-10f;
  return static_cast<float>(x) * kInv2Pow32 + kInv2Pow32 / 2.0f;
}

struct RngState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;  // 32-bit outputs consumed so far
};

class Philox {
 public:
  explicit Philox(uint64_t seed = 0, uint64_t stream = 0, uint64_t offset = 0);
  explicit Philox(const RngState& s) : Philox(s.seed, s.stream, s.offset) {}

  uint32_t next_u32();
  float uniform();  // (0, 1]
  float normal();   // standard normal, Box-Muller on two consecutive outputs
  // Uniform integer in [0, n), n > 0 (rejection-free multiply-shift; bias below 2^-32 * n).
  uint32_t below(uint32_t n);

  RngState state() const { return {seed_, stream_, offset_}; }
  void set_state(const RngState& s);
  void skip(uint64_t n_outputs);

 private:
  void refill();
  uint64_t seed_, stream_, offset_;
  PhiloxCounter block_{};
  bool block_valid_ = false;
};

// The value at output position `index` of stream (seed, stream), without a generator:
// lets parallel loops draw element i independently (dropout, initialisers).
uint32_t philox_at(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace tarn
