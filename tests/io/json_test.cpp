// The strict JSON reader/writer behind safetensors headers and checkpoint manifests.
#include "framework/io/json.h"

#include <gtest/gtest.h>

#include <cmath>

#include "framework/io/crc32.h"
#include "tests/io/io_test_util.h"

namespace tarn {
namespace {

TEST(Json, ParsesObjectsInFileOrderWithOffsets) {
  const json::Value v = json::parse(R"( {"b": [1, 2.5, -3e2], "a": {"x": null, "y": true}, "c": "s"} )", "t");
  ASSERT_TRUE(v.is_object());
  const auto& m = v.members("root");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].first, "b");
  EXPECT_EQ(m[1].first, "a");
  EXPECT_EQ(m[2].first, "c");
  EXPECT_EQ(v.offset(), 1u);
  EXPECT_EQ(m[0].second.items("b")[0].as_u64("b0"), 1u);
  EXPECT_DOUBLE_EQ(m[0].second.items("b")[1].as_double("b1"), 2.5);
  EXPECT_DOUBLE_EQ(m[0].second.items("b")[2].as_double("b2"), -300.0);
  EXPECT_TRUE(v.find("a")->find("x")->is_null());
  EXPECT_TRUE(v.find("a")->find("y")->as_bool("y"));
  EXPECT_EQ(v.find("c")->as_string("c"), "s");
  EXPECT_EQ(v.find("zz"), nullptr);
}

TEST(Json, U64IsExactBeyondDoublePrecision) {
  const json::Value v = json::parse("[18446744073709551615, 9007199254740993]", "t");
  EXPECT_EQ(v.items("")[0].as_u64("x"), 18446744073709551615ull);
  EXPECT_EQ(v.items("")[1].as_u64("x"), 9007199254740993ull);  // 2^53 + 1: a double would lose it
  EXPECT_ERROR_CONTAINS(json::parse("[18446744073709551616]", "t").items("")[0].as_u64("off"),
                        "does not fit in 64 bits");
  EXPECT_ERROR_CONTAINS(json::parse("[-1]", "t").items("")[0].as_u64("shape[0]"),
                        "shape[0]: expected a non-negative integer, got -1");
  EXPECT_ERROR_CONTAINS(json::parse("[2.0]", "t").items("")[0].as_u64("n"), "expected a non-negative integer");
  EXPECT_ERROR_CONTAINS(json::parse("[1e3]", "t").items("")[0].as_u64("n"), "expected a non-negative integer");
}

TEST(Json, StringsEscapesAndSurrogates) {
  const json::Value v = json::parse(R"(["a\"b\\c\/\n\t\u00e9\ud83d\ude00", "π"])", "t");
  EXPECT_EQ(v.items("")[0].as_string(""), "a\"b\\c/\n\t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(v.items("")[1].as_string(""), "\xCF\x80");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\ud83d"])", "t"), "high surrogate");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\ude00"])", "t"), "lone low surrogate");
  EXPECT_ERROR_CONTAINS(json::parse("[\"a\nb\"]", "t"), "raw control character");
  EXPECT_ERROR_CONTAINS(json::parse(R"(["\x"])", "t"), "invalid escape");
}

TEST(Json, ErrorsNameSourceByteLineAndColumn) {
  EXPECT_ERROR_CONTAINS(json::parse("{\n  \"a\": 1\n  \"b\": 2}", "cfg.json"),
                        "cfg.json: invalid JSON at byte 13 (line 3, column 3): expected ',' or '}'");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": 1, \"a\": 2}", "h", 8),
                        "h: invalid JSON at byte 17 (line 1, column 10): duplicate key \"a\"");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": {\"k\": 1, \"k\": 1}}", "h"), "duplicate key \"k\"");
  EXPECT_ERROR_CONTAINS(json::parse("[1, 2,]", "t"), "unexpected character ']'");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": 1,}", "t"), "expected a string key");
  EXPECT_ERROR_CONTAINS(json::parse("[01]", "t"), "leading zeros");
  EXPECT_ERROR_CONTAINS(json::parse("[NaN]", "t"), "unexpected character 'N'");
  EXPECT_ERROR_CONTAINS(json::parse("{} x", "t"), "unexpected content after the JSON value");
  EXPECT_ERROR_CONTAINS(json::parse("{\"a\": [1, 2", "t"), "unexpected end of input inside an array");
  EXPECT_ERROR_CONTAINS(json::parse("", "t"), "unexpected end of input");
  EXPECT_ERROR_CONTAINS(json::parse("[\"\xC3\x28\"]", "t"), "at byte 2 (line 1, column 3): invalid UTF-8");
  EXPECT_ERROR_CONTAINS(json::parse("// c\n{}", "t"), "unexpected character '/'");
}

TEST(Json, DepthIsLimited) {
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_ERROR_CONTAINS(json::parse(deep, "t"), "nesting deeper than 64");
  const std::string ok = std::string(60, '[') + std::string(60, ']');
  EXPECT_NO_THROW(json::parse(ok, "t"));
}

TEST(Json, DumpRoundTrips) {
  json::Value v = json::Value::object();
  v.set("name", json::Value::string("q\"\x01\xCF\x80"));
  v.set("n", json::Value::number(uint64_t{18446744073709551615ull}));
  v.set("x", json::Value::number(0.1));
  v.set("list", json::Value::array({json::Value::boolean(false), json::Value()}));
  v.set("n", json::Value::number(int64_t{-7}));  // replaces, keeps position
  const std::string compact = v.dump();
  EXPECT_EQ(compact, "{\"name\":\"q\\\"\\u0001\xCF\x80\",\"n\":-7,\"x\":0.1,\"list\":[false,null]}");
  const json::Value back = json::parse(v.dump(2), "t");
  EXPECT_EQ(back.dump(), compact);
  EXPECT_ERROR_CONTAINS(json::Value::number(std::nan("")), "non-finite");
}

TEST(Json, Utf8Validation) {
  EXPECT_EQ(json::find_invalid_utf8("plain \xCF\x80 \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(json::find_invalid_utf8("ab\xC0\x80"), 2u);          // overlong NUL
  EXPECT_EQ(json::find_invalid_utf8("\xED\xA0\x80"), 0u);        // surrogate U+D800
  EXPECT_EQ(json::find_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(json::find_invalid_utf8("x\xE2\x82"), 1u);           // truncated sequence
  EXPECT_EQ(json::find_invalid_utf8("\x80"), 0u);                // stray continuation
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
}

}  // namespace
}  // namespace tarn
