// Philox4x32-10 against the known-answer vectors published with Random123
// (Random123/tests/kat_vectors, the three "philox4x32 10" lines: counter[4] key[2] -> out[4]).
#include <gtest/gtest.h>

#include "framework/rng.h"

namespace tarn {
namespace {

struct Kat {
  const char* name;
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

constexpr uint32_t kOnes = 0xffffffffu;
const Kat kKats[] = {
    {"zeros", {0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {"ones", {kOnes, kOnes, kOnes, kOnes}, {kOnes, kOnes}, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {"pi_digits",
     {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

TEST(PhiloxKat, MatchesRandom123KnownAnswerVectors) {
  for (const Kat& k : kKats) {
    const PhiloxCounter out = philox4x32_10(k.counter, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.expected[i]) << k.name << " word " << i;
  }
}

// The generator's layout (cuRAND's): key = seed split low/high, counter = (block, stream).
// The all-zero vector is then seed 0, stream 0, outputs 0..3.
TEST(PhiloxKat, GeneratorFirstBlockIsTheZeroVector) {
  Philox rng(0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rng.next_u32(), kKats[0].expected[i]);
}

// (seed, stream, offset) spelled onto the words of the KAT-checked bijection: seed = key
// (low, high), counter = (block low, block high, stream low, stream high), block = offset / 4.
// Pi-digit words in every position check each 64-bit split. (The offset counts outputs in 64
// bits, as cuRAND's does, so blocks stop at 2^62: the block's top two bits are cleared.)
TEST(PhiloxKat, SeedStreamAndBlockMapOntoKeyAndCounterWords) {
  const uint64_t seed = 0x299f31d0a4093822ull, stream = 0x0370734413198a2eull;
  const uint64_t block = 0x05a308d3243f6a88ull;
  const PhiloxCounter expected = philox4x32_10({0x243f6a88u, 0x05a308d3u, 0x13198a2eu, 0x03707344u},
                                               {0xa4093822u, 0x299f31d0u});
  Philox rng(seed, stream, block * 4);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(philox_at(seed, stream, block * 4 + i), expected[i]) << "word " << i;
    EXPECT_EQ(rng.next_u32(), expected[i]) << "word " << i;
  }
}

}  // namespace
}  // namespace tarn
