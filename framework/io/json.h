#pragma once
// A strict JSON (RFC 8259) reader and writer for the files tarn writes and reads itself:
// safetensors headers, checkpoint manifests, progress and metrics. nlohmann-json checks the
// grammar (json.cpp); Value is tarn's own tree because these uses need what nlohmann's DOM does
// not keep: object members in file order, duplicate keys rejected (the safetensors format forbids
// them), number literals kept as written (integers exact beyond 2^53, dump() writing back the
// same text), and errors that name the source, byte offset, line and column.
//
// Strict: no comments, no trailing commas, no NaN/Infinity, no leading zeros, no raw control
// characters in strings, UTF-8 checked, lone surrogates in \u escapes rejected, nesting depth
// limited (kMaxDepth) so hostile input cannot exhaust the stack.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tarn::json {

class Value {
 public:
  enum class Kind : uint8_t { null, boolean, number, string, array, object };
  using Member = std::pair<std::string, Value>;

  Value() = default;  // null
  static Value boolean(bool b);
  static Value number(int64_t v);
  static Value number(uint64_t v);
  static Value number(double v);            // finite only
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object(std::vector<Member> members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_number() const { return kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }
  static const char* kind_name(Kind k);
  const char* kind_name() const { return kind_name(kind_); }

  // Byte offset of the value's first character in the parsed text (0 for built values).
  size_t offset() const { return offset_; }

  // Accessors throw tarn::Error naming `what` (e.g. "tensor \"w\": shape[1]") on a kind mismatch.
  bool as_bool(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  // The number written as a non-negative integer literal (no sign, fraction or exponent) that
  // fits in 64 bits, exactly; anything else is an error.
  uint64_t as_u64(std::string_view what) const;
  double as_double(std::string_view what) const;
  const std::string& number_text() const { return text_; }  // the literal as written
  const std::vector<Value>& items(std::string_view what) const;     // array
  const std::vector<Member>& members(std::string_view what) const;  // object, in file order

  // Object lookup (null when absent or when this is not an object).
  const Value* find(std::string_view key) const;

  // Building.
  Value& push_back(Value v);                        // array
  Value& set(std::string key, Value v);             // object: replaces an existing key

  // Serialises compactly (indent < 0) or pretty-printed with `indent` spaces per level.
  std::string dump(int indent = -1) const;

 private:
  friend class Reader;
  explicit Value(Kind kind, std::string text = {}) : kind_(kind), text_(std::move(text)) {}
  Kind kind_ = Kind::null;
  bool bool_ = false;
  std::string text_;  // string value, or number literal
  std::vector<Value> items_;
  std::vector<Member> members_;
  size_t offset_ = 0;
};

constexpr int kMaxDepth = 64;

// Parses exactly one JSON value (surrounded by optional whitespace). `source` names the input
// in errors: "<source>: invalid JSON at byte 57 (line 2, column 9): expected ',' or '}' after
// an object member". `base_offset` is added to reported byte offsets (e.g. 8 for a safetensors
// header, so offsets are file offsets).
Value parse(std::string_view text, std::string_view source, size_t base_offset = 0);

// A JSON string literal with quotes; escapes ", \, and control characters. `s` must be UTF-8.
std::string quote(std::string_view s);

// Returns the byte offset of the first invalid UTF-8 sequence in `s` (overlong forms, surrogates
// and code points above U+10FFFF count as invalid), or npos when `s` is valid UTF-8.
size_t find_invalid_utf8(std::string_view s);

}  // namespace tarn::json
