#include "framework/io/utf8.h"

#include <gtest/gtest.h>

namespace tarn {
namespace {

TEST(Utf8, AcceptsAsciiAndWellFormedMultiByteCharacters) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9"));              // é, 2 bytes
  EXPECT_TRUE(is_valid_utf8("\xE4\xB8\xAD"));             // 中, 3 bytes
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));         // 😀, 4 bytes
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));         // U+10FFFF, the last code point
}

TEST(Utf8, RejectsMalformedSequencesAtTheirOffset) {
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);             // never valid in UTF-8
  EXPECT_EQ(first_invalid_utf8("a\x80"), 1u);              // stray continuation
  EXPECT_EQ(first_invalid_utf8("a\xC3"), 1u);              // truncated 2-byte sequence
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0u);           // overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xE0\x80\xAF"), 0u);       // overlong 3-byte
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);      // UTF-16 surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);   // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("\xE4\xB8 "), 0u);          // continuation missing
  EXPECT_EQ(first_invalid_utf8("ok\xC3\xA9\xC3"), 4u);     // error after a valid character
}

}  // namespace
}  // namespace tarn
