#include "framework/io/json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "kernels/check.h"

namespace tarn::json {

// ---------------------------------------------------------------------------------------------
// Values

Value Value::boolean(bool b) {
  Value v(Kind::boolean);
  v.bool_ = b;
  return v;
}

Value Value::number(int64_t x) { return Value(Kind::number, std::to_string(x)); }
Value Value::number(uint64_t x) { return Value(Kind::number, std::to_string(x)); }

Value Value::number(double x) {
  TARN_CHECK(std::isfinite(x), "json: cannot write the non-finite number ", x);
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);  // shortest round-trip form
  TARN_CHECK(ec == std::errc(), "json: cannot format ", x);
  return Value(Kind::number, std::string(buf, end));
}

Value Value::string(std::string s) { return Value(Kind::string, std::move(s)); }

Value Value::array(std::vector<Value> items) {
  Value v(Kind::array);
  v.items_ = std::move(items);
  return v;
}

Value Value::object(std::vector<Member> members) {
  Value v(Kind::object);
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
  // An array's or object's brackets around its count items, dump_item(i) writing item i, one
  // item a line when indenting (an empty one stays on its line: [] and {}).
  auto dump_items = [&](char open, char close, size_t count, auto dump_item) {
    out += open;
    for (size_t i = 0; i < count; ++i) {
      if (i) out += ',';
      newline(level + 1);
      dump_item(i);
    }
    if (count) newline(level);
    out += close;
  };
  switch (v.kind()) {
    case Value::Kind::null: out += "null"; break;
    case Value::Kind::boolean: out += v.as_bool("") ? "true" : "false"; break;
    case Value::Kind::number: out += v.number_text(); break;
    case Value::Kind::string: out += quote(v.as_string("")); break;
    case Value::Kind::array: {
      const auto& items = v.items("");
      dump_items('[', ']', items.size(), [&](size_t i) { dump_to(items[i], indent, level + 1, out); });
      break;
    }
    case Value::Kind::object: {
      const auto& members = v.members("");
      dump_items('{', '}', members.size(), [&](size_t i) {
        out += quote(members[i].first);
        out += indent < 0 ? ":" : ": ";
        dump_to(members[i].second, indent, level + 1, out);
      });
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
// Reader: nlohmann's SAX parser checks the grammar and calls Reader for each token; Reader builds
// the Values and adds what nlohmann leaves out: member order, literals as written and offsets,
// duplicate keys and the depth limit refused, and errors worded as tarn's own parser worded them
// (tests and users rely on the words and positions).

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return std::string(1, c);
  static const char* hex = "0123456789abcdef";
  return str_cat("\\x", hex[u >> 4], hex[u & 15]);
}

// Length of the number literal at s[i]: its longest prefix matching
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, which is the token nlohmann reads there.
size_t number_length(std::string_view s, size_t i) {
  const size_t start = i;
  auto digit_at = [&](size_t k) { return k < s.size() && is_digit(s[k]); };
  auto digits = [&] { while (digit_at(i)) ++i; };
  if (i < s.size() && s[i] == '-') ++i;
  if (!digit_at(i)) return 0;
  if (s[i++] != '0') digits();
  if (i < s.size() && s[i] == '.' && digit_at(i + 1)) ++i, digits();
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const size_t sign = i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-') ? 1 : 0;
    if (digit_at(i + 1 + sign)) i += 1 + sign, digits();
  }
  return i - start;
}

// Length of the string literal at s[i], which nlohmann has read without error.
size_t string_length(std::string_view s, size_t i) {
  size_t k = i + 1;
  while (s[k] != '"') k += s[k] == '\\' ? 2 : 1;
  return k + 1 - i;
}

}  // namespace

class Reader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  Reader(std::string_view text, std::string_view source, size_t base)
      : s_(text), source_(source), base_(base), seen_(text) {}

  Value read() {
    const size_t bad = find_invalid_utf8(s_);
    if (bad != std::string_view::npos) fail_at(bad, "invalid UTF-8 byte sequence");
    // nlohmann skips a byte order mark (EF BB BF), which is no JSON value.
    if (!s_.empty() && s_[0] == '\xEF') fail_at(0, "unexpected character '\\xef', expected a value");
    blank_if_overflowing(next_token());
    nlohmann::json::sax_parse(seen_.data(), seen_.data() + seen_.size(), this);
    // nlohmann takes a NUL byte for the end of the input; here it is content after the value.
    const size_t rest = skip_space(end_);
    if (rest != s_.size()) fail_at(rest, "unexpected content after the JSON value");
    return std::move(root_);
  }

  // Each callback comes right after nlohmann has read the token it reports, which starts at
  // next_token(): the first byte after the previous token that is no space, ',' or ':'.
  bool null() override { return add(Value(), next_token(), 4); }
  bool boolean(bool b) override { return add(Value::boolean(b), next_token(), b ? 4 : 5); }
  bool number_integer(number_integer_t) override { return add_number(); }
  bool number_unsigned(number_unsigned_t) override { return add_number(); }
  bool number_float(number_float_t, const string_t&) override { return add_number(); }
  bool string(string_t& s) override {
    const size_t at = next_token();
    return add(Value::string(std::move(s)), at, string_length(s_, at));
  }
  bool binary(binary_t&) override { return false; }  // JSON text has no binary values

  bool start_object(std::size_t) override { return open(Value::object()); }
  bool start_array(std::size_t) override { return open(Value::array()); }
  bool key(string_t& k) override {
    const size_t at = next_token();
    auto& members = open_.back().members_;
    for (const auto& m : members)
      if (m.first == k) fail_at(at, str_cat("duplicate key ", quote(k)));
    members.emplace_back(std::move(k), Value());  // the value fills it in
    return token_read(at + string_length(s_, at), Last::key);
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t read, const std::string&, const nlohmann::detail::exception& e) override {
    syntax_error(read - 1, e);  // nlohmann has read the byte it rejects (or tried past the end)
  }

 private:
  enum class Last { nothing, open, key, value };  // the last token reported

  size_t skip_space(size_t i) const {
    while (i < s_.size() && is_space(s_[i])) ++i;
    return i;
  }
  size_t next_token() const {
    size_t i = end_;
    while (i < s_.size() && (is_space(s_[i]) || s_[i] == ',' || s_[i] == ':')) ++i;
    return i;
  }

  bool token_read(size_t end, Last last) {
    end_ = end;
    last_ = last;
    blank_if_overflowing(next_token());
    return true;
  }

  bool open(Value v) {
    const size_t at = next_token();
    if (open_.size() >= static_cast<size_t>(kMaxDepth)) fail_at(at, str_cat("nesting deeper than ", kMaxDepth, " levels"));
    v.offset_ = base_ + at;
    open_.push_back(std::move(v));
    return token_read(at + 1, Last::open);
  }

  bool close() {
    const size_t at = next_token();
    Value done = std::move(open_.back());
    open_.pop_back();
    place(std::move(done));
    return token_read(at + 1, Last::value);
  }

  bool add(Value v, size_t at, size_t length) {
    v.offset_ = base_ + at;
    place(std::move(v));
    return token_read(at + length, Last::value);
  }

  bool add_number() {
    const size_t at = next_token(), length = number_length(s_, at);
    // As written: "-0", "1.50" and "1e999" stay so.
    return add(Value(Value::Kind::number, std::string(s_.substr(at, length))), at, length);
  }

  void place(Value v) {
    if (open_.empty()) {
      root_ = std::move(v);
    } else if (open_.back().is_array()) {
      open_.back().items_.push_back(std::move(v));
    } else {
      open_.back().members_.back().second = std::move(v);
    }
  }

  // nlohmann refuses a number literal beyond a double's range (1e999) as it reads it; tarn keeps
  // the literal and leaves as_double() to refuse it. So such a literal is blanked ("0" and spaces,
  // offsets unchanged) in the copy nlohmann reads, before nlohmann reaches it: it reads byte by
  // byte, no further than one byte past the token it last reported.
  void blank_if_overflowing(size_t at) {
    const size_t length = number_length(s_, at);
    if (length == 0) return;
    const std::string literal(s_.substr(at, length));
    const char next = at + length < s_.size() ? s_[at + length] : ' ';
    // A '.' or 'e' that could have continued the literal makes nlohmann read on, and fail there.
    const bool read_on = ((next == 'e' || next == 'E') && literal.find_first_of("eE") == std::string::npos) ||
                         (next == '.' && literal.find_first_of(".eE") == std::string::npos);
    if (read_on || std::isfinite(std::strtod(literal.c_str(), nullptr))) return;
    seen_[at] = '0';
    std::fill(seen_.begin() + at + 1, seen_.begin() + at + length, ' ');
  }

  // Finds what was expected after the last token reported and names the byte that breaks it.
  [[noreturn]] void syntax_error(size_t bad, const nlohmann::detail::exception& e) {
    size_t at = skip_space(end_);
    const bool in_object = !open_.empty() && open_.back().is_object();
    bool key_expected = last_ == Last::open && in_object;
    if (last_ == Last::key) {
      if (at == s_.size() || s_[at] != ':') fail_at(at, "expected ':' after an object key");
      at = skip_space(at + 1);
    } else if (last_ == Last::value) {
      if (is_digit(s_[end_ - 1]) && end_ < s_.size() && is_digit(s_[end_]))
        fail_at(end_, "leading zeros are not allowed in numbers");  // "01": nlohmann reads 0, then 1
      if (open_.empty()) fail_at(at, "unexpected content after the JSON value");
      if (at == s_.size())
        fail_at(at, in_object ? "unexpected end of input inside an object" : "unexpected end of input inside an array");
      if (s_[at] != ',')
        fail_at(at, in_object ? "expected ',' or '}' after an object member" : "expected ',' or ']' after an array item");
      at = skip_space(at + 1);
      key_expected = in_object;
    }
    // A key or a value starts at `at`, and nlohmann refused it.
    if (at < s_.size() && s_[at] == '"') string_error(bad, e.what());
    if (key_expected) fail_at(at, "expected a string key");
    if (at == s_.size()) fail_at(at, "unexpected end of input, expected a value");
    const char c = s_[at];
    if (e.id == 406) fail_at(at, str_cat(s_.substr(at, number_length(s_, at)), " is out of range for a double"));
    if (c == '-' || is_digit(c)) {
      if (bad == at + 1) fail_at(bad, "expected a digit");  // after the minus sign
      fail_at(bad, s_[bad - 1] == '.' ? "expected a digit after the decimal point" : "expected a digit in the exponent");
    }
    for (const char* literal : {"true", "false", "null"})
      if (c == literal[0]) fail_at(at, str_cat("expected '", literal, "'"));
    fail_at(at, str_cat("unexpected character '", printable(c), "', expected a value"));
  }

  // nlohmann's lexer stops just after the offending byte of a string; its message says which rule
  // (before "; last read: '...'", which quotes the input and so may say anything).
  [[noreturn]] void string_error(size_t bad, std::string_view what) {
    what = what.substr(0, what.find("; last read"));
    auto says = [&](std::string_view rule) { return what.find(rule) != std::string_view::npos; };
    if (says("missing closing quote")) fail_at(s_.size(), "unterminated string");
    if (says("control character")) fail_at(bad, "raw control character in a string (must be escaped)");
    if (says("after backslash")) {
      if (bad == s_.size()) fail_at(bad, "unterminated escape");
      fail_at(bad - 1, str_cat("invalid escape '\\", printable(s_[bad]), "'"));
    }
    if (says("4 hex digits")) {
      size_t hex = bad;  // the first of the four digits after "\u"
      while (s_[hex - 1] != 'u') --hex;
      fail_at(hex + 4 > s_.size() ? hex : bad, hex + 4 > s_.size() ? "truncated \\u escape" : "expected a hex digit in a \\u escape");
    }
    if (says("must follow U+D800")) fail_at(bad - 5, "lone low surrogate in a \\u escape");
    if (says("must be followed by U+DC00")) {
      // After "\uD8xx", nlohmann stops 6 bytes on when no '\' follows, 7 when the '\' is not
      // followed by 'u', and 11 when the second escape is no low surrogate.
      const size_t escape = s_[bad - 1] == '\\' ? bad - 7 : s_[bad - 5] == '\\' ? bad - 11 : bad - 6;
      fail_at(escape, "high surrogate without a following low surrogate");
    }
    fail_at(bad, what);  // no other rule is known to nlohmann 3.11
  }

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
    throw Error(str_cat(source_, ": invalid JSON at byte ", base_ + pos, " (line ", line, ", column ", col, "): ", msg));
  }

  std::string_view s_;    // the text as given: offsets, literals and errors refer to it
  std::string_view source_;
  size_t base_;
  std::string seen_;      // the copy nlohmann reads (blank_if_overflowing)
  std::vector<Value> open_;  // the arrays and objects not yet closed, outermost first
  Value root_;
  size_t end_ = 0;        // one past the last token reported
  Last last_ = Last::nothing;
};

Value parse(std::string_view text, std::string_view source, size_t base_offset) {
  return Reader(text, source, base_offset).read();
}

}  // namespace tarn::json
