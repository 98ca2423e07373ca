#include "framework/io/utf8.h"

#include <cstdint>

namespace tarn {
namespace {
constexpr uint8_t kAsciiEnd = 0x80;
constexpr uint8_t kContinuationMask = 0xC0, kContinuationTag = 0x80;

bool is_continuation(uint8_t b) { return (b & kContinuationMask) == kContinuationTag; }
}  // namespace

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < kAsciiEnd) {
      ++i;
      continue;
    }
    // Table 3-7 of the Unicode standard: the lead byte fixes the sequence length and the
    // allowed range of the second byte (which is what excludes overlongs and surrogates).
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // overlong below U+0800
      if (b == 0xED) hi = 0x9F;  // UTF-16 surrogates U+D800..U+DFFF
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // overlong below U+10000
      if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // stray continuation byte, C0/C1 overlong lead, or F5..FF
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (!is_continuation(s[i + k])) return i;
    i += len;
  }
  return n;
}

}  // namespace tarn
