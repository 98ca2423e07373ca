#pragma once
// JSON for the files tarn writes and reads itself (safetensors headers, checkpoint manifests,
// progress, metrics, config.json): values are nlohmann-json's ordered_json (object members in
// the order written or read). This file adds only what nlohmann lacks:
// - parse(): strict RFC 8259 (no comments, trailing commas, NaN, leading zeros, byte order
//   mark, raw control characters or invalid UTF-8), duplicate keys refused (safetensors forbids
//   them), nesting limited to kMaxDepth, and errors that name the source, byte offset, line and
//   column (in characters) of the token at fault, in nlohmann's words;
// - dump(): nlohmann's layout with doubles in their shortest round-trip form (std::to_chars:
//   0.1, 1e-05, 3), the bytes tarn's files have always had, and non-finite numbers refused;
// - typed access whose errors name the field ("tensor \"w\": shape[0]: expected a non-negative
//   integer, got -6").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tarn::json {

using Json = nlohmann::ordered_json;
using Members = std::vector<std::pair<const std::string, Json>>;  // an object's, in order

constexpr int kMaxDepth = 64;

// Parses exactly one JSON value (surrounded by optional whitespace). `source` names the input
// in errors: "<source>: invalid JSON at byte 57 (line 2, column 9): expected ',' or '}' after
// an object member", "... (line 1, column 3): syntax error while parsing value - invalid
// number; expected digit after '-'". `base_offset` is added to reported byte offsets (e.g. 8
// for a safetensors header, so offsets are file offsets).
Json parse(std::string_view text, std::string_view source, size_t base_offset = 0);

// Serialises compactly (indent < 0) or pretty-printed with `indent` spaces per level. Files are
// written with this, not Json::dump(), whose numbers differ (nlohmann writes 3.0 and 0.0001
// where tarn's files have 3 and 1e-04); Json::dump() is for messages quoting a value.
std::string dump(const Json& v, int indent = -1);

// A JSON string literal with quotes; escapes ", \, and control characters. `s` must be UTF-8.
inline std::string quote(std::string_view s) { return Json(std::string(s)).dump(); }

// "null", "a boolean", "a number", "a string", "an array" or "an object".
std::string kind_name(const Json& v);

// Accessors that throw tarn::Error naming `what` on a kind mismatch.
bool as_bool(const Json& v, std::string_view what);
const std::string& as_string(const Json& v, std::string_view what);
// A non-negative integer that fits in 64 bits, exactly (no sign, fraction or exponent).
uint64_t as_u64(const Json& v, std::string_view what);
double as_double(const Json& v, std::string_view what);
const Json::array_t& items(const Json& v, std::string_view what);     // array
const Members& members(const Json& v, std::string_view what);         // object
// Object member (null when absent or when `v` is not an object).
const Json* find(const Json& v, std::string_view key);
// Whether `v` is the integer n, written as one ("2", not "2.0").
inline bool is_integer(const Json& v, uint64_t n) { return v.is_number_unsigned() && v.get<uint64_t>() == n; }

}  // namespace tarn::json
