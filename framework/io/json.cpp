#include "framework/io/json.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "kernels/check.h"

namespace tarn::json {

// ---------------------------------------------------------------------------------------------
// Values

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.bool_ = b;
  return v;
}

Value Value::number(int64_t x) {
  Value v;
  v.kind_ = Kind::number;
  v.text_ = std::to_string(x);
  return v;
}

Value Value::number(uint64_t x) {
  Value v;
  v.kind_ = Kind::number;
  v.text_ = std::to_string(x);
  return v;
}

Value Value::number(double x) {
  TARN_CHECK(std::isfinite(x), "json: cannot write the non-finite number ", x);
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);  // shortest round-trip form
  TARN_CHECK(ec == std::errc(), "json: cannot format ", x);
  Value v;
  v.kind_ = Kind::number;
  v.text_.assign(buf, end);
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.text_ = std::move(s);
  return v;
}

Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v;
  v.kind_ = Kind::object;
  v.members_ = std::move(members);
  return v;
}

const char* Value::kind_name(Kind k) {
  switch (k) {
    case Kind::null: return "null";
    case Kind::boolean: return "a boolean";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::array: return "an array";
    case Kind::object: return "an object";
  }
  return "?";
}

namespace {
[[noreturn]] void kind_error(std::string_view what, const char* expected, const Value& v) {
  throw Error(str_cat(what, ": expected ", expected, ", got ", v.kind_name()));
}
}  // namespace

bool Value::as_bool(std::string_view what) const {
  if (kind_ != Kind::boolean) kind_error(what, "a boolean", *this);
  return bool_;
}

const std::string& Value::as_string(std::string_view what) const {
  if (kind_ != Kind::string) kind_error(what, "a string", *this);
  return text_;
}

uint64_t Value::as_u64(std::string_view what) const {
  if (kind_ != Kind::number) kind_error(what, "a non-negative integer", *this);
  const bool digits_only =
      !text_.empty() && text_.find_first_not_of("0123456789") == std::string::npos;
  TARN_CHECK(digits_only, what, ": expected a non-negative integer, got ", text_);
  uint64_t out = 0;
  auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), out);
  TARN_CHECK(ec == std::errc() && end == text_.data() + text_.size(), what, ": ", text_,
             " does not fit in 64 bits");
  return out;
}

double Value::as_double(std::string_view what) const {
  if (kind_ != Kind::number) kind_error(what, "a number", *this);
  double out = 0;
  auto [end, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), out);
  TARN_CHECK(ec == std::errc() && end == text_.data() + text_.size(), what, ": ", text_,
             " is out of range for a double");
  return out;
}

const std::vector<Value>& Value::items(std::string_view what) const {
  if (kind_ != Kind::array) kind_error(what, "an array", *this);
  return items_;
}

const std::vector<Value::Member>& Value::members(std::string_view what) const {
  if (kind_ != Kind::object) kind_error(what, "an object", *this);
  return members_;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

Value& Value::push_back(Value v) {
  TARN_CHECK(kind_ == Kind::array, "json: push_back on ", kind_name());
  items_.push_back(std::move(v));
  return items_.back();
}

Value& Value::set(std::string key, Value v) {
  TARN_CHECK(kind_ == Kind::object, "json: set on ", kind_name());
  for (auto& [k, old] : members_)
    if (k == key) return old = std::move(v);
  members_.emplace_back(std::move(key), std::move(v));
  return members_.back().second;
}

namespace {
void dump_to(const Value& v, int indent, int level, std::string& out) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * lvl, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::null: out += "null"; break;
    case Value::Kind::boolean: out += v.as_bool("") ? "true" : "false"; break;
    case Value::Kind::number: out += v.number_text(); break;
    case Value::Kind::string: out += quote(v.as_string("")); break;
    case Value::Kind::array: {
      const auto& items = v.items("");
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        dump_to(items[i], indent, level + 1, out);
      }
      if (!items.empty()) newline(level);
      out += ']';
      break;
    }
    case Value::Kind::object: {
      const auto& members = v.members("");
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        out += quote(members[i].first);
        out += indent < 0 ? ":" : ": ";
        dump_to(members[i].second, indent, level + 1, out);
      }
      if (!members.empty()) newline(level);
      out += '}';
      break;
    }
  }
}
}  // namespace

std::string Value::dump(int indent) const {
  std::string out;
  dump_to(*this, indent, 0, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and quoting

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
    } else {
      return i;  // continuation byte, overlong 2-byte lead (C0, C1) or beyond U+10FFFF
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    if (overlong || surrogate || cp > 0x10FFFF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  Parser(std::string_view text, std::string_view source, size_t base)
      : s_(text), source_(source), base_(base) {}

  Value parse_document() {
    const size_t bad = find_invalid_utf8(s_);
    if (bad != std::string_view::npos) fail_at(bad, "invalid UTF-8 byte sequence");
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected content after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail_at(size_t pos, std::string_view msg) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(s_[k]) & 0xC0) != 0x80) {
        ++col;  // count characters, not UTF-8 continuation bytes
      }
    }
    throw Error(str_cat(source_, ": invalid JSON at byte ", base_ + pos, " (line ", line, ", column ",
                        col, "): ", msg));
  }
  [[noreturn]] void fail(std::string_view msg) const { fail_at(i_, msg); }

  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }

  void skip_ws() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  void expect_literal(std::string_view lit) {
    if (s_.substr(i_, lit.size()) != lit) fail(str_cat("expected '", lit, "'"));
    i_ += lit.size();
  }

  Value parse_value(int depth) {
    if (at_end()) fail("unexpected end of input, expected a value");
    const size_t start = i_;
    Value v;
    switch (peek()) {
      case '{': v = parse_object(depth + 1); break;
      case '[': v = parse_array(depth + 1); break;
      case '"': v = Value::string(parse_string()); break;
      case 't': expect_literal("true"), v = Value::boolean(true); break;
      case 'f': expect_literal("false"), v = Value::boolean(false); break;
      case 'n': expect_literal("null"); break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          v = parse_number();
        } else {
          fail(str_cat("unexpected character '", printable(peek()), "', expected a value"));
        }
    }
    v.offset_ = base_ + start;
    return v;
  }

  static std::string printable(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) return std::string(1, c);
    static const char* hex = "0123456789abcdef";
    return str_cat("\\x", hex[u >> 4], hex[u & 15]);
  }

  Value parse_object(int depth) {
    if (depth > kMaxDepth) fail(str_cat("nesting deeper than ", kMaxDepth, " levels"));
    ++i_;  // {
    Value obj = Value::object();
    skip_ws();
    if (peek() == '}') {
      ++i_;
      return obj;
    }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a string key");
      const size_t key_pos = i_;
      std::string key = parse_string();
      for (const auto& m : obj.members_)
        if (m.first == key) fail_at(key_pos, str_cat("duplicate key ", quote(key)));
      skip_ws();
      if (peek() != ':') fail("expected ':' after an object key");
      ++i_;
      skip_ws();
      Value v = parse_value(depth);
      obj.members_.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        return obj;
      }
      fail(at_end() ? "unexpected end of input inside an object" : "expected ',' or '}' after an object member");
    }
  }

  Value parse_array(int depth) {
    if (depth > kMaxDepth) fail(str_cat("nesting deeper than ", kMaxDepth, " levels"));
    ++i_;  // [
    Value arr = Value::array();
    skip_ws();
    if (peek() == ']') {
      ++i_;
      return arr;
    }
    while (true) {
      skip_ws();
      arr.items_.push_back(parse_value(depth));
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == ']') {
        ++i_;
        return arr;
      }
      fail(at_end() ? "unexpected end of input inside an array" : "expected ',' or ']' after an array item");
    }
  }

  Value parse_number() {
    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const size_t start = i_;
    auto digits = [&] {
      const size_t d0 = i_;
      while (!at_end() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d0;
    };
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
      if (peek() >= '0' && peek() <= '9') fail("leading zeros are not allowed in numbers");
    } else if (digits() == 0) {
      fail("expected a digit");
    }
    if (peek() == '.') {
      ++i_;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    Value v;
    v.kind_ = Value::Kind::number;
    v.text_ = std::string(s_.substr(start, i_ - start));
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_ + k];
      unsigned d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail_at(i_ + k, "expected a hex digit in a \\u escape");
      cp = cp * 16 + d;
    }
    i_ += 4;
    return cp;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++i_;  // "
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string (must be escaped)");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      const size_t esc = i_;
      ++i_;
      if (at_end()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(i_, 2) != "\\u") fail_at(esc, "high surrogate without a following low surrogate");
            i_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail_at(esc, "high surrogate without a following low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail_at(esc, "lone low surrogate in a \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail_at(esc, str_cat("invalid escape '\\", printable(e), "'"));
      }
    }
  }

  std::string_view s_;
  std::string_view source_;
  size_t base_;
  size_t i_ = 0;
};

Value parse(std::string_view text, std::string_view source, size_t base_offset) {
  return Parser(text, source, base_offset).parse_document();
}

}  // namespace tarn::json
