// The strict JSON reader/writer behind safetensors headers and checkpoint manifests.
#include "framework/io/json.h"

#include <gtest/gtest.h>

#include <cmath>

#include "framework/io/crc32.h"
#include "framework/io/utf8.h"
#include "tests/io/io_test_util.h"

namespace tarn {
namespace {

TEST(Json, ParsesObjectsInFileOrderWithOffsets) {
  const json::Json v = json::parse(R"( {"b": [1, 2.5, -3e2], "a": {"x": null, "y": true}, "c": "s"} )", "t");
  ASSERT_TRUE(v.is_object());
  const auto& m = json::members(v, "root");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].first, "b");
  EXPECT_EQ(m[1].first, "a");
  EXPECT_EQ(m[2].first, "c");
  EXPECT_EQ(json::as_u64(json::items(m[0].second, "b")[0], "b0"), 1u);
  EXPECT_DOUBLE_EQ(json::as_double(json::items(m[0].second, "b")[1], "b1"), 2.5);
  EXPECT_DOUBLE_EQ(json::as_double(json::items(m[0].second, "b")[2], "b2"), -300.0);
  EXPECT_TRUE(json::find(*json::find(v, "a"), "x")->is_null());
  EXPECT_TRUE(json::as_bool(*json::find(*json::find(v, "a"), "y"), "y"));
  EXPECT_EQ(json::as_string(*json::find(v, "c"), "c"), "s");
  EXPECT_EQ(json::find(v, "zz"), nullptr);
  EXPECT_EQ(json::find(json::items(m[0].second, "b")[0], "b"), nullptr);  // not an object
}

TEST(Json, U64IsExactBeyondDoublePrecision) {
  const json::Json v = json::parse("[18446744073709551615, 9007199254740993]", "t");
  auto first = [](const std::string& text) { return json::items(json::parse(text, "t"), "")[0]; };
  EXPECT_EQ(json::as_u64(json::items(v, "")[0], "x"), 18446744073709551615ull);
  EXPECT_EQ(json::as_u64(json::items(v, "")[1], "x"), 9007199254740993ull);  // 2^53 + 1: a double would lose it
  EXPECT_ERROR_CONTAINS(json::as_u64(first("[18446744073709551616]"), "off"), "does not fit in 64 bits");
  EXPECT_ERROR_CONTAINS(json::as_u64(first("[-1]"), "shape[0]"), "shape[0]: expected a non-negative integer, got -1");
  EXPECT_ERROR_CONTAINS(json::as_u64(first("[2.0]"), "n"), "expected a non-negative integer");
  EXPECT_ERROR_CONTAINS(json::as_u64(first("[1e3]"), "n"), "expected a non-negative integer");
  EXPECT_ERROR_CONTAINS(json::as_u64(first("[\"7\"]"), "n"), "n: expected a non-negative integer, got a string");
}

TEST(Json, StringsEscapesAndSurrogates) {
  const json::Json v = json::parse(R"(["a\"b\\c\/\n\t\u00e9\ud83d\ude00", "π"])", "t");
  EXPECT_EQ(json::as_string(json::items(v, "")[0], ""), "a\"b\\c/\n\t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(json::as_string(json::items(v, "")[1], ""), "\xCF\x80");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\ud83d"])", "t"), "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\ude00"])", "t"), "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
  EXPECT_ERROR_CONTAINS(json::parse("[\"a\nb\"]", "t"), "control character U+000A (LF) must be escaped");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\x"])", "t"), "forbidden character after backslash");
}

TEST(Json, ErrorsNameSourceByteLineAndColumn) {
  EXPECT_ERROR_CONTAINS(json::parse("{\n  \"a\": 1\n  \"b\": 2}", "cfg.json"),
                        "cfg.json: invalid JSON at byte 13 (line 3, column 3): expected ',' or '}'");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": 1, \"a\": 2}", "h", 8),
                        "h: invalid JSON at byte 17 (line 1, column 10): duplicate key \"a\"");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": {\"k\": 1, \"k\": 1}}", "h"), "duplicate key \"k\"");
  EXPECT_ERROR_CONTAINS(json::parse("[1, 2,]", "t"), "unexpected ']'; expected '[', '{', or a literal");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": 1,}", "t"), "parsing object key - unexpected '}'; expected string literal");
  EXPECT_ERROR_CONTAINS(json::parse("[01]", "t"), "byte 2 (line 1, column 3): expected ',' or ']' after an array item");
  EXPECT_ERROR_CONTAINS(json::parse("[NaN]", "t"),
                        "byte 1 (line 1, column 2): syntax error while parsing value - invalid literal");
  EXPECT_ERROR_CONTAINS(json::parse("{} x", "t"), "invalid literal; expected end of input");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": [1, 2", "t"), "parsing array - unexpected end of input; expected ']'");
  EXPECT_ERROR_CONTAINS(json::parse("", "t"), "unexpected end of input");
  EXPECT_ERROR_CONTAINS(json::parse("[\"\xC3\x28\"]", "t"), "at byte 2 (line 1, column 3): invalid UTF-8");
  EXPECT_ERROR_CONTAINS(json::parse("// c\n{}", "t"),
                        "byte 0 (line 1, column 1): syntax error while parsing value - invalid literal");
}

TEST(Json, DepthIsLimited) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_ERROR_CONTAINS(json::parse(deep, "t"), "nesting deeper than 64");
  const std::string ok = std::string(60, '[') + std::string(60, ']');
  EXPECT_NO_THROW(json::parse(ok, "t"));
}

TEST(Json, DumpRoundTrips) {
  json::Json v = json::Json::object();
  v["name"] = "q\"\x01\xCF\x80";
  v["n"] = uint64_t{18446744073709551615ull};
  v["x"] = 0.1;
  v["list"] = json::Json::array({false, nullptr});
  v["n"] = int64_t{-7};  // replaces, keeps position
  const std::string compact = json::dump(v);
  EXPECT_EQ(compact, "{\"name\":\"q\\\"\\u0001\xCF\x80\",\"n\":-7,\"x\":0.1,\"list\":[false,null]}");
  const json::Json back = json::parse(json::dump(v, 2), "t");
  EXPECT_EQ(json::dump(back), compact);
  EXPECT_EQ(json::dump(v, 2), "{\n  \"name\": \"q\\\"\\u0001\xCF\x80\",\n  \"n\": -7,\n  \"x\": 0.1,\n  \"list\": [\n    false,\n"
                              "    null\n  ]\n}");
  EXPECT_EQ(json::dump(json::Json::object({{"a", json::Json::array()}, {"b", json::Json::object()}}), 2),
            "{\n  \"a\": [],\n  \"b\": {}\n}");
  // Doubles in their shortest round-trip form (std::to_chars), as tarn's files have always had them.
  EXPECT_EQ(json::dump(json::Json::array({3.0, 1e-05, 0.0001, 1e20, -0.0, 2.5, 1e15, 123456.789})),
            "[3,1e-05,1e-04,1e+20,-0,2.5,1e+15,123456.789]");
  EXPECT_ERROR_CONTAINS(json::dump(json::Json(std::nan(""))), "non-finite");
  EXPECT_EQ(json::quote("a\"\n\x01\xCF\x80"), "\"a\\\"\\n\\u0001\xCF\x80\"");
}

// The reader is nlohmann-json's parser: each error below is placed (byte, line, column) exactly as
// tarn's own parser placed it before nlohmann-json replaced it, and worded in nlohmann-json's words
// (but for a missing ',' and the rules nlohmann-json lacks).
TEST(Json, ErrorsKeepTheirPlaces) {
  const std::string v = "syntax error while parsing value - ";
  const std::string high = "invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF";
  const std::pair<std::string, std::string> cases[] = {
      {"{\"a\" 1}",
       "byte 5 (line 1, column 6): syntax error while parsing object separator - unexpected number literal; expected ':'"},
      {"{\"a\": 1", "byte 7 (line 1, column 8): syntax error while parsing object - unexpected end of input; expected '}'"},
      {"{1:2}",
       "byte 1 (line 1, column 2): syntax error while parsing object key - unexpected number literal; expected string literal"},
      {"{\"a\":1 \"b\"}", "byte 7 (line 1, column 8): expected ',' or '}' after an object member"},
      {"[1 2]", "byte 3 (line 1, column 4): expected ',' or ']' after an array item"},
      {"[true1]", "byte 5 (line 1, column 6): expected ',' or ']' after an array item"},
      {"[1,,2]", "byte 3 (line 1, column 4): " + v + "unexpected ','; expected '[', '{', or a literal"},
      {"[\"\xCF\x80\", x]", "byte 7 (line 1, column 7): " + v + "invalid literal"},
      {"[1]]", "byte 3 (line 1, column 4): " + v + "unexpected ']'; expected end of input"},
      {"[tru]", "byte 1 (line 1, column 2): " + v + "invalid literal"},
      {"{\"a\": nul}", "byte 6 (line 1, column 7): " + v + "invalid literal"},
      {"[-]", "byte 2 (line 1, column 3): " + v + "invalid number; expected digit after '-'"},
      {"[-x]", "byte 2 (line 1, column 3): " + v + "invalid number; expected digit after '-'"},
      {"[-01]", "byte 3 (line 1, column 4): expected ',' or ']' after an array item"},
      {"[1.]", "byte 3 (line 1, column 4): " + v + "invalid number; expected digit after '.'"},
      {"[1.5e]", "byte 5 (line 1, column 6): " + v + "invalid number; expected '+', '-', or digit after exponent"},
      {"[1e+]", "byte 4 (line 1, column 5): " + v + "invalid number; expected digit after exponent sign"},
      {"[\"abc", "byte 5 (line 1, column 6): " + v + "invalid string: missing closing quote"},
      {"[\"abc\\", "byte 6 (line 1, column 7): " + v + "invalid string: forbidden character after backslash"},
      {"[\"\\q\"]", "byte 2 (line 1, column 3): " + v + "invalid string: forbidden character after backslash"},
      {"[\"a\tb\"]", "byte 3 (line 1, column 4): " + v + "invalid string: control character U+0009 (HT) must be escaped"},
      {"[\"\\u12", "byte 4 (line 1, column 5): " + v + "invalid string: '\\u' must be followed by 4 hex digits"},
      {"[\"\\u12x4\"]", "byte 6 (line 1, column 7): " + v + "invalid string: '\\u' must be followed by 4 hex digits"},
      {"[\"\\ud83d\\u\"]", "byte 10 (line 1, column 11): " + v + "invalid string: '\\u' must be followed by 4 hex digits"},
      {"[\"\\ud83d\"]", "byte 2 (line 1, column 3): " + v + high},
      {"[\"\\ud83d\\x\"]", "byte 2 (line 1, column 3): " + v + high},
      {"[\"\\ud83d\\ud83d\"]", "byte 2 (line 1, column 3): " + v + high},
      {"[\"\\ude00\"]", "byte 2 (line 1, column 3): " + v + "invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
      {"{\"a\":1,\"\\u0061\":2}", "byte 7 (line 1, column 8): duplicate key \"a\""},  // compared decoded
      {"{\"x\": [1, {\"y\": 2, \"y\": 3}]}", "byte 19 (line 1, column 20): duplicate key \"y\""},
      // nlohmann-json ends its input at a NUL byte and skips a byte order mark; JSON does neither.
      {std::string("{\"a\":1}\0x", 9), "byte 7 (line 1, column 8): unexpected content after the JSON value"},
      {std::string("[1\0]", 4), "byte 2 (line 1, column 3): expected ',' or ']' after an array item"},
      {"\xEF\xBB\xBF{}", "byte 0 (line 1, column 1): unexpected character '\\xef', expected a value"},
      // The quoted input in nlohmann-json's message must not be taken for its rule.
      {"[\"missing closing quote\n\"]", "byte 23 (line 1, column 24): " + v + "invalid string: control character U+000A (LF)"},
  };
  for (const auto& [text, error] : cases) {
    SCOPED_TRACE(text);
    EXPECT_ERROR_CONTAINS(json::parse(text, "t"), "t: invalid JSON at " + error);
  }
}

TEST(Json, DepthLimitIsExactly64) {
  EXPECT_NO_THROW(json::parse(std::string(64, '[') + std::string(64, ']'), "t"));
  EXPECT_ERROR_CONTAINS(json::parse(std::string(65, '[') + std::string(65, ']'), "t"),
                        "at byte 64 (line 1, column 65): nesting deeper than 64 levels");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\":" + std::string(64, '[') + std::string(64, ']') + "}", "t"),
                        "at byte 68 (line 1, column 69): nesting deeper than 64 levels");
}

// Values do not keep their offsets (nlohmann's ordered_json has no place for them); errors in
// nested values still name the file offset.
TEST(Json, OffsetsOfNestedValuesCountFromTheBase) {
  EXPECT_ERROR_CONTAINS(json::parse("{\"k\": [true, \"s\", {\"n\": -0.5e1, \"n\": 1}]}", "t", 8),
                        "t: invalid JSON at byte 40 (line 1, column 33): duplicate key \"n\"");
  EXPECT_ERROR_CONTAINS(json::parse("{\"k\": [true, \"s\", {\"n\": -0.5e1 1}]}", "t", 8),
                        "t: invalid JSON at byte 39 (line 1, column 32): expected ',' or '}' after an object member");
  EXPECT_ERROR_CONTAINS(json::parse("{\"k\": [true, \"s\" {\"n\": -0.5e1}]}", "t", 8),
                        "t: invalid JSON at byte 25 (line 1, column 18): expected ',' or ']' after an array item");
}

// Numbers are nlohmann's: integers exact, others doubles (so "1.50" is written back as 1.5); "-0"
// stays the double -0, which no count takes; a literal beyond a double's range is refused where
// it stands.
TEST(Json, NumbersAndTheirLimits) {
  const json::Json v = json::parse("[-0, 1.50, 1E+2, 2, 1e-999]", "t");
  EXPECT_EQ(json::dump(v), "[-0,1.5,100,2,0]");
  const auto& items = json::items(v, "");
  EXPECT_ERROR_CONTAINS(json::as_u64(items[0], "n"), "n: expected a non-negative integer, got -0");
  EXPECT_TRUE(std::signbit(json::as_double(items[0], "x")));
  EXPECT_EQ(json::as_u64(items[3], "n"), 2u);
  EXPECT_DOUBLE_EQ(json::as_double(items[1], "x"), 1.5);
  EXPECT_ERROR_CONTAINS(json::parse("[-0, 1.50, 1E+2, 1e999, 2, 1e-999]", "t"),
                        "t: invalid JSON at byte 17 (line 1, column 18): 1e999 is out of range for a double");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": -1e999 \"b\"}", "t"),
                        "at byte 6 (line 1, column 7): -1e999 is out of range for a double");
  // Such a literal cut short by a '.' or 'e' is refused where the digit is missing.
  const std::string huge = "1" + std::string(400, '0');
  EXPECT_ERROR_CONTAINS(json::parse("[" + huge + "e]", "t"),
                        "byte 403 (line 1, column 404): syntax error while parsing value - invalid number; "
                        "expected '+', '-', or digit after exponent");
  EXPECT_ERROR_CONTAINS(json::parse("[" + huge + ".]", "t"),
                        "byte 403 (line 1, column 404): syntax error while parsing value - invalid number; "
                        "expected digit after '.'");
}

TEST(Json, Utf8Validation) {
  // framework/io/utf8.h, which parse() checks the whole text with first.
  EXPECT_TRUE(is_valid_utf8("plain \xCF\x80 \xF0\x9F\x98\x80"));
  EXPECT_EQ(first_invalid_utf8("ab\xC0\x80"), 2u);          // overlong NUL
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);        // surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("x\xE2\x82"), 1u);           // truncated sequence
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);                // stray continuation
}

TEST(Crc32, MatchesZlibCheckValues) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32 check value (zlib.crc32)
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
  EXPECT_EQ(crc32_hex(0x1u), "00000001");
  // Incremental over an odd split equals one pass, for lengths that exercise both loops.
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 37 + 11);
  const uint32_t whole = crc32(data.data(), data.size());
  for (size_t cut : {0u, 1u, 7u, 8u, 13u, 999u}) {
    const uint32_t part = crc32(data.data() + cut, data.size() - cut, crc32(data.data(), cut));
    EXPECT_EQ(part, whole) << "cut at " << cut;
  }
  // A bytewise reference.
  uint32_t ref = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    ref ^= c;
    for (int k = 0; k < 8; ++k) ref = (ref & 1) ? (ref >> 1) ^ 0xEDB88320u : ref >> 1;
  }
  EXPECT_EQ(whole, ~ref);
  // Python's zlib.crc32, the reference MANIFEST.json's checksums are meant to match.
  EXPECT_EQ(crc32_hex(crc32("The quick brown fox jumps over the lazy dog", 43)), "414fa339");
  std::string mib(1 << 20, '\0');
  for (size_t i = 0; i < mib.size(); ++i) mib[i] = static_cast<char>((i * i * 31 + 7) % 251);
  EXPECT_EQ(crc32_hex(crc32(mib.data(), mib.size())), "7a0b0f31");
}

}  // namespace
}  // namespace tarn
