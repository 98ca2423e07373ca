#include "framework/io/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <unordered_set>

#include "framework/io/utf8.h"
#include "kernels/check.h"

namespace tarn::json {
namespace {

// An input iterator over the text that records how far nlohmann's lexer has read: a SAX callback
// comes right after the lexer has read its token.
struct Counted {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char *p, **read;
  reference operator*() const { return *p; }
  Counted& operator++() { return *read = ++p, *this; }
  bool operator!=(const Counted& o) const { return p != o.p; }
  bool operator==(const Counted& o) const { return p == o.p; }
};

std::string printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  constexpr const char* kHex = "0123456789abcdef";
  return u >= 0x20 && u < 0x7F ? std::string(1, c) : str_cat("\\x", kHex[u >> 4], kHex[u & 15]);
}

// nlohmann's json_sax_dom_parser builds the value; Reader adds tarn's rules and tarn's words for
// nlohmann's errors (tests and users rely on both). sax_parse calls the handler's methods
// statically, so these hide the base class's.
class Reader : public nlohmann::detail::json_sax_dom_parser<Json> {
  using Dom = nlohmann::detail::json_sax_dom_parser<Json>;

 public:
  Reader(Json& out, std::string_view s, std::string_view source, size_t base)
      : Dom(out), s_(s), source_(source), base_(base), read_(s.data()) {}

  void read() {
    if (const size_t bad = first_invalid_utf8(s_); bad != s_.size()) fail_at(bad, "invalid UTF-8 byte sequence");
    // nlohmann skips a byte order mark (EF BB BF), which is no JSON value, and ends the input at
    // a NUL byte, which is content after the value.
    if (!s_.empty() && s_[0] == '\xEF') fail_at(0, "unexpected character '\\xef', expected a value");
    Json::sax_parse(Counted{s_.data(), &read_}, Counted{s_.data() + s_.size(), &read_}, this);
    if (const size_t nul = s_.find('\0'); nul != s_.npos) fail_at(nul, "unexpected content after the JSON value");
  }

  bool number_integer(number_integer_t x) {  // 0 was "-0" (a non-negative integer is unsigned)
    return x == 0 ? Dom::number_float(-0.0, "-0") : Dom::number_integer(x);
  }
  bool start_object(std::size_t n) { return open(), Dom::start_object(n); }
  bool start_array(std::size_t n) { return open(), Dom::start_array(n); }
  bool end_object() { return keys_.pop_back(), Dom::end_object(); }
  bool end_array() { return keys_.pop_back(), Dom::end_array(); }
  bool key(string_t& k) {
    if (!keys_.back().insert(k).second)  // the key's closing quote is the last byte read
      fail_at(quote_before(static_cast<size_t>(read_ - s_.data()) - 1), str_cat("duplicate key ", quote(k)));
    return Dom::key(k);
  }

  // nlohmann has read `read` bytes, the last the one it refused (one past the end at the end);
  // its message names the rule, and what it was parsing ("... while parsing array - ...").
  [[noreturn]] bool parse_error(std::size_t read, const std::string& token, const nlohmann::detail::exception& e) {
    const std::string_view what = e.what();
    auto says = [&](std::string_view s) { return what.find(s) != what.npos; };
    const size_t bad = read - 1, from = what.find("while parsing ") + 14;
    const std::string_view context = what.substr(from, what.find(" - ", from) - from);
    const bool after_value = what.size() > 21 && what.substr(what.size() - 21) == "expected end of input";
    if (e.id == 406) fail_at(read - token.size(), str_cat(token, " is out of range for a double"));
    // Where the token nlohmann refused starts.
    size_t at = bad;
    if (says("invalid string")) {
      at = quote_before(bad);
    } else if (says("number literal;") || says("string literal;")) {
      at = read - token.size();  // nlohmann quotes the token as read
    } else if (says("invalid number")) {  // and the byte it refused as <U+XXXX> when a control character
      const bool control = token.size() >= 8 && token.compare(token.size() - 8, 3, "<U+") == 0;
      at = bad - (token.size() - (bad == s_.size() ? 0 : control ? 8 : 1));
    } else if (says("invalid literal")) {  // from the longest start of true, false or null before `bad`
      for (std::string_view literal : {"true", "false", "null"})
        for (size_t n = 1; n < literal.size() && n <= bad; ++n)
          if (s_.substr(bad - n, n) == literal.substr(0, n)) at = std::min(at, bad - n);
    } else if (says("true literal;") || says("null literal;") || says("false literal;")) {
      at = read - (says("false literal;") ? 5 : 4);
    }
    const bool value_expected = context == "value" && !after_value;
    if ((value_expected || context == "object key") && says("invalid string"))
      string_error(bad, what.substr(0, what.find("; last read")));
    if (value_expected && says("invalid number"))
      fail_at(bad, says("after '-'")   ? "expected a digit"
                   : says("after '.'") ? "expected a digit after the decimal point"
                                       : "expected a digit in the exponent");
    if ((says("number literal;") || says("invalid number")) && at > 0 && std::isdigit(static_cast<unsigned char>(s_[at - 1])) &&
        std::isdigit(static_cast<unsigned char>(s_[at])))
      fail_at(at, "leading zeros are not allowed in numbers");  // "01": nlohmann reads 0, then 1
    const bool end = says("unexpected end of input") && at >= s_.size();
    if (context == "object separator") fail_at(at, "expected ':' after an object key");
    if (context == "object key") fail_at(at, "expected a string key");
    if (context == "object" || context == "array") {
      if (end) fail_at(at, str_cat("unexpected end of input inside an ", context));
      fail_at(at, context == "object" ? "expected ',' or '}' after an object member" : "expected ',' or ']' after an array item");
    }
    if (after_value) fail_at(at, "unexpected content after the JSON value");
    if (end) fail_at(at, "unexpected end of input, expected a value");
    for (const char* literal : {"true", "false", "null"})
      if (s_[at] == literal[0]) fail_at(at, str_cat("expected '", literal, "'"));
    fail_at(at, str_cat("unexpected character '", printable(s_[at]), "', expected a value"));
  }

 private:
  size_t quote_before(size_t i) const {  // the last '"' before s_[i] that no backslash escapes
    auto escaped = [&](size_t q) { size_t b = q; while (s_[b - 1] == '\\') --b; return (q - b) % 2 == 1; };
    do --i; while (s_[i] != '"' || escaped(i));
    return i;
  }

  void open() {  // nlohmann has just read the '[' or '{'
    if (keys_.size() >= static_cast<size_t>(kMaxDepth))
      fail_at(static_cast<size_t>(read_ - s_.data()) - 1, str_cat("nesting deeper than ", kMaxDepth, " levels"));
    keys_.emplace_back();
  }

  // In a string, nlohmann's lexer stops just after the offending byte.
  [[noreturn]] void string_error(size_t bad, std::string_view what) {
    auto says = [&](std::string_view rule) { return what.find(rule) != std::string_view::npos; };
    if (says("missing closing quote")) fail_at(s_.size(), "unterminated string");
    if (says("control character")) fail_at(bad, "raw control character in a string (must be escaped)");
    if (says("after backslash") && bad == s_.size()) fail_at(bad, "unterminated escape");
    if (says("after backslash")) fail_at(bad - 1, str_cat("invalid escape '\\", printable(s_[bad]), "'"));
    if (says("4 hex digits")) {
      size_t hex = bad;  // the first of the four digits after "\u"
      while (s_[hex - 1] != 'u') --hex;
      if (hex + 4 > s_.size()) fail_at(hex, "truncated \\u escape");
      fail_at(bad, "expected a hex digit in a \\u escape");
    }
    if (says("must follow U+D800")) fail_at(bad - 5, "lone low surrogate in a \\u escape");
    // After "\uD8xx", nlohmann stops 6 bytes on when no '\' follows, 7 when the '\' is not
    // followed by 'u', and 11 when the second escape is no low surrogate.
    if (says("must be followed by U+DC00"))
      fail_at(s_[bad - 1] == '\\' ? bad - 7 : s_[bad - 5] == '\\' ? bad - 11 : bad - 6,
              "high surrogate without a following low surrogate");
    fail_at(bad, what);  // no other rule is known to nlohmann 3.11
  }

  [[noreturn]] void fail_at(size_t pos, std::string_view msg) const {
    const std::string_view before = s_.substr(0, pos);
    const size_t line_start = before.rfind('\n') + 1;  // 0 on the first line
    const auto line = 1 + std::count(before.begin(), before.end(), '\n');
    const auto column = 1 + std::count_if(before.begin() + line_start, before.end(),
                                          [](char c) { return (c & 0xC0) != 0x80; });  // characters
    throw Error(str_cat(source_, ": invalid JSON at byte ", base_ + pos, " (line ", line, ", column ", column, "): ", msg));
  }

  std::string_view s_, source_;
  size_t base_;
  const char* read_;                                    // one past the last byte nlohmann read
  std::vector<std::unordered_set<std::string>> keys_;  // of each open array or object
};

void dump_to(const Json& v, int indent, int level, std::string& out) {
  if (v.is_number_float()) {
    TARN_CHECK(std::isfinite(v.get<double>()), "json: cannot write the non-finite number ", v.get<double>());
    char buf[32];
    return void(out.append(buf, std::to_chars(buf, buf + sizeof buf, v.get<double>()).ptr));
  }
  if (!v.is_structured() || v.empty()) return void(out += v.dump());
  auto newline = [&](int lvl) {
    if (indent >= 0) out.append(1, '\n').append(static_cast<size_t>(indent) * lvl, ' ');
  };
  out += v.is_object() ? '{' : '[';
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != v.begin()) out += ',';
    newline(level + 1);
    if (v.is_object()) out += quote(it.key()) + (indent < 0 ? ":" : ": ");
    dump_to(it.value(), indent, level + 1, out);
  }
  newline(level);
  out += v.is_object() ? '}' : ']';
}

// `v` when `ok`, else the error "<what>: expected <expected>, got <v's kind>".
const Json& expect(const Json& v, bool ok, std::string_view what, const char* expected) {
  return ok ? v : throw Error(str_cat(what, ": expected ", expected, ", got ", kind_name(v)));
}

}  // namespace

Json parse(std::string_view text, std::string_view source, size_t base_offset) {
  Json out;
  Reader(out, text, source, base_offset).read();
  return out;
}

std::string dump(const Json& v, int indent) {
  std::string out;
  dump_to(v, indent, 0, out);
  return out;
}

std::string kind_name(const Json& v) { return v.is_null() ? "null" : str_cat(v.is_structured() ? "an " : "a ", v.type_name()); }
bool as_bool(const Json& v, std::string_view what) { return expect(v, v.is_boolean(), what, "a boolean").get<bool>(); }
double as_double(const Json& v, std::string_view what) { return expect(v, v.is_number(), what, "a number").get<double>(); }
const std::string& as_string(const Json& v, std::string_view what) {
  return expect(v, v.is_string(), what, "a string").get_ref<const std::string&>();
}
const Json::array_t& items(const Json& v, std::string_view what) {
  return expect(v, v.is_array(), what, "an array").get_ref<const Json::array_t&>();
}
const Members& members(const Json& v, std::string_view what) {
  return expect(v, v.is_object(), what, "an object").get_ref<const Json::object_t&>();
}

uint64_t as_u64(const Json& v, std::string_view what) {
  if (expect(v, v.is_number(), what, "a non-negative integer").is_number_unsigned()) return v.get<uint64_t>();
  const double x = v.get<double>();  // nlohmann reads an integer beyond 64 bits as a double
  TARN_CHECK(!(x >= 0x1p64 && x == std::floor(x)), what, ": ", v.dump(), " does not fit in 64 bits");
  throw Error(str_cat(what, ": expected a non-negative integer, got ", v.dump()));
}

const Json* find(const Json& v, std::string_view key) {
  const auto it = v.is_object() ? v.find(std::string(key)) : v.end();
  return it == v.end() ? nullptr : &*it;
}

}  // namespace tarn::json
