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

using Dom = nlohmann::detail::json_sax_dom_parser<Json>;
using Lexer = nlohmann::detail::lexer<Json, nlohmann::detail::iterator_input_adapter<const char*>>;

// An input iterator that records how far nlohmann's lexer has read the text.
struct Counted : std::iterator_traits<const char*> {
  using iterator_category = std::input_iterator_tag;
  const char *p, **read;
  reference operator*() const { return *p; }
  Counted& operator++() { return *read = ++p, *this; }
  bool operator!=(const Counted& o) const { return p != o.p; }
};

// nlohmann's json_sax_dom_parser builds the value, Reader adds tarn's rules and places errors:
// sax_parse calls a handler's methods (right after the lexer has read their token) statically,
// so these hide the base class's. nlohmann reads a non-negative integer as unsigned: 0 was "-0".
struct Reader : Dom {
  std::string_view s, source;
  size_t base;
  const char* read_to;                                // one past the last byte nlohmann read
  std::vector<std::unordered_set<std::string>> keys;  // of each open array or object

  bool number_integer(number_integer_t x) { return x == 0 ? Dom::number_float(-0.0, "-0") : Dom::number_integer(x); }
  bool start_object(std::size_t n) { return open() && Dom::start_object(n); }
  bool start_array(std::size_t n) { return open() && Dom::start_array(n); }
  bool end_object() { return keys.pop_back(), Dom::end_object(); }
  bool end_array() { return keys.pop_back(), Dom::end_array(); }
  bool key(string_t& k) {
    if (!keys.back().insert(k).second) fail_at(token_start(read_to - s.data()), str_cat("duplicate key ", quote(k)));
    return Dom::key(k);
  }
  bool open() {  // nlohmann has just read the '[' or '{'
    if (keys.size() == kMaxDepth) fail_at(read_to - s.data() - 1, str_cat("nesting deeper than ", kMaxDepth, " levels"));
    return keys.emplace_back(), true;
  }

  // nlohmann has read `read` bytes (one more at the end), the last the one it refused. A malformed
  // number or string where one may stand is placed at that byte, all else where its token starts.
  [[noreturn]] bool parse_error(std::size_t read, const std::string& token, const nlohmann::detail::exception& e) {
    if (e.id == 406) fail_at(token_start(read), str_cat(token, " is out of range for a double"));
    std::string why = e.what() + std::string_view(e.what()).find(": ") + 2;  // after nlohmann's place
    const size_t quoted = why.find("; last read: '");                      // after a malformed token's rule
    if (quoted != why.npos) why.erase(quoted, 15 + token.size());
    auto says = [&](std::string_view words) { return why.find(words) != why.npos; };
    const bool in_string = says("invalid string") && (quoted == why.size() || says("; expected string literal"));
    size_t at = in_string || (says("invalid number") && quoted == why.size()) ? read - 1 : token_start(read);
    // An escape's error is placed at its '\' (nlohmann stops 5 bytes past a low surrogate's, 6, 7
    // or 11 past a high one's), a truncated \u escape's at its first digit.
    if (in_string && says("surrogate")) at = s.rfind("\\u", at - (says("must follow") ? 5 : 6));
    if (in_string && says("after backslash") && at < s.size()) --at;
    if (const size_t hex = s.rfind('u', at - 1) + 1; in_string && says("4 hex digits") && hex + 4 > s.size()) at = hex;
    if ((says(" object - ") || says(" array - ")) && read <= s.size())  // nlohmann names only the bracket
      why = says(" object - ") ? "expected ',' or '}' after an object member" : "expected ',' or ']' after an array item";
    fail_at(at, why);
  }

  // Where the token that ends at byte `end` (or a malformed one) starts, scanning the text again.
  size_t token_start(size_t end) const {
    Lexer lexer({s.data(), s.data() + s.size()});
    for (size_t from = 0;;) {
      const size_t start = std::min(s.find_first_not_of(" \t\n\r", from), s.size());
      if (lexer.scan() == Lexer::token_type::parse_error || (from = lexer.get_position()) >= end) return start;
    }
  }

  [[noreturn]] void fail_at(size_t pos, std::string_view msg) const {
    const std::string_view before = s.substr(0, pos), line = before.substr(before.rfind('\n') + 1);
    const auto lines = std::count(before.begin(), before.end(), '\n');
    const auto chars = std::count_if(line.begin(), line.end(), [](char c) { return (c & 0xC0) != 0x80; });  // not bytes
    throw Error(str_cat(source, ": invalid JSON at byte ", base + pos, " (line ", lines + 1, ", column ", chars + 1, "): ", msg));
  }
};

std::string& dump_to(const Json& v, int indent, int level, std::string& out) {
  if (v.is_number_float()) {
    TARN_CHECK(std::isfinite(v.get<double>()), "json: cannot write the non-finite number ", v.get<double>());
    char buf[32];
    return out.append(buf, std::to_chars(buf, buf + sizeof buf, v.get<double>()).ptr);
  }
  if (!v.is_structured() || v.empty()) return out += v.dump();
  const std::string newline = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent) * level, ' ');
  out += v.is_object() ? '{' : '[';
  for (auto it = v.begin(); it != v.end(); ++it) {
    out.append(it == v.begin() ? "" : ",").append(newline).append(std::max(indent, 0), ' ');
    if (v.is_object()) out += quote(it.key()) + (indent < 0 ? ":" : ": ");
    dump_to(it.value(), indent, level + 1, out);
  }
  return out.append(newline) += v.is_object() ? '}' : ']';
}

// `v` when `ok`, else the error "<what>: expected <expected>, got <v's kind>".
const Json& expect(const Json& v, bool ok, std::string_view what, const char* expected) {
  return ok ? v : throw Error(str_cat(what, ": expected ", expected, ", got ", kind_name(v)));
}

}  // namespace

Json parse(std::string_view text, std::string_view source, size_t base_offset) {
  Json out;
  Reader r{Dom(out), text, source, base_offset, nullptr, {}};
  if (const size_t bad = first_invalid_utf8(text); bad != text.size()) r.fail_at(bad, "invalid UTF-8 byte sequence");
  // nlohmann skips a byte order mark and ends the input at a NUL byte; JSON does neither.
  if (!text.empty() && text[0] == '\xEF') r.fail_at(0, "unexpected character '\\xef', expected a value");
  Json::sax_parse(Counted{{}, text.data(), &r.read_to}, Counted{{}, text.data() + text.size(), &r.read_to}, &r);
  if (const size_t nul = text.find('\0'); nul != text.npos) r.fail_at(nul, "unexpected content after the JSON value");
  return out;
}

std::string dump(const Json& v, int indent) { std::string out; return dump_to(v, indent, 0, out); }

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
  const auto it = v.find(key);  // end() when `v` is no object
  return it == v.end() ? nullptr : &*it;
}

}  // namespace tarn::json
