#pragma once
// Runs a check on every instruction set the attention kernels can use here: the build's, and
// the run-time AVX-512 GEMM tiles when the CPU has them (kernels/cpu/linear_attention_simd.h).
#include <vector>

#include "kernels/cpu/linear_attention_simd.h"

namespace tarn::attention_test {

inline std::vector<bool> isa_settings() {
  std::vector<bool> s{false};
  if (kernels::cpu::simd::avx512_tiles_available()) s.push_back(true);
  return s;
}

// Selects the AVX-512 tiles (or not) for a scope.
class Avx512Tiles {
 public:
  explicit Avx512Tiles(bool on) : previous_(kernels::cpu::simd::set_avx512_tiles(on)) {}
  ~Avx512Tiles() { kernels::cpu::simd::set_avx512_tiles(previous_); }
  Avx512Tiles(const Avx512Tiles&) = delete;
  Avx512Tiles& operator=(const Avx512Tiles&) = delete;

 private:
  bool previous_;
};

}  // namespace tarn::attention_test
