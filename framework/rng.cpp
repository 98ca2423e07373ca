#include "framework/rng.h"

#include <cmath>

namespace tarn {
namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

PhiloxCounter block_counter(uint64_t block, uint64_t stream) {
  return {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(stream),
          static_cast<uint32_t>(stream >> 32)};
}
PhiloxKey seed_key(uint64_t seed) { return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}; }
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k = {k[0] + kWeyl0, k[1] + kWeyl1};
  }
  return c;
}

uint32_t philox_at(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32_10(block_counter(index / 4, stream), seed_key(seed))[index % 4];
}

Philox::Philox(uint64_t seed, uint64_t stream, uint64_t offset) : seed_(seed), stream_(stream), offset_(offset) {}

void Philox::set_state(const RngState& s) {
  seed_ = s.seed;
  stream_ = s.stream;
  offset_ = s.offset;
  block_valid_ = false;
}

void Philox::skip(uint64_t n) {
  if ((offset_ % 4) + n >= 4) block_valid_ = false;
  offset_ += n;
}

void Philox::refill() {
  block_ = philox4x32_10(block_counter(offset_ / 4, stream_), seed_key(seed_));
  block_valid_ = true;
}

uint32_t Philox::next_u32() {
  if (!block_valid_) refill();
  const uint32_t v = block_[offset_ % 4];
  ++offset_;
  if (offset_ % 4 == 0) block_valid_ = false;
  return v;
}

float Philox::uniform() { return uint_to_uniform(next_u32()); }

float Philox::normal() {
  // curand's Box-Muller: radius from the first output, angle from the second.
  constexpr float kTwoPi = 6.2831855f;
  const float u = uint_to_uniform(next_u32());
  const float v = uint_to_uniform(next_u32()) * kTwoPi;
  return std::sqrt(-2.0f * std::log(u)) * std::sin(v);
}

uint32_t Philox::below(uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(next_u32()) * n) >> 32);
}

}  // namespace tarn
