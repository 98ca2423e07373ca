#pragma once
// Derives independent Philox seeds for the data pipeline's random decisions from the run's
// seed. The randomness itself always comes from Philox (framework/rng.h); this only picks
// the key, so that e.g. the noise of example i in epoch e depends on (seed, e, i) alone and
// not on the batch order or on how many examples were drawn before it.
#include <cstdint>

namespace tarn {

// What a derived seed is for: different purposes never share a Philox key.
// kDropoutRank keys the dropout stream of data-parallel rank r > 0 (epoch = r).
enum class SeedPurpose : uint64_t { kNoise = 1, kShuffle = 2, kDropoutRank = 3 };

// splitmix64's finaliser (Steele et al. 2014): a bijective 64-bit mixer with full avalanche,
// so nearby (seed, epoch) pairs give unrelated keys.
inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t derive_seed(uint64_t seed, SeedPurpose purpose, uint64_t epoch) {
  return mix64(mix64(mix64(seed) ^ static_cast<uint64_t>(purpose)) ^ epoch);
}

}  // namespace tarn
