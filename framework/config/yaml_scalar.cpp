#include "framework/config/yaml_scalar.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace tarn::config {
namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53: every integer below is a double
constexpr size_t kMaxDescribedChars = 60;                // longer values are cut in messages
constexpr double kMinFixed = 1e-4, kMaxFixed = 1e15;     // format_number's fixed-notation range

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of a run of digits starting at i.
size_t digits_at(const std::string& s, size_t i) {
  size_t n = 0;
  while (i + n < s.size() && is_digit(s[i + n])) ++n;
  return n;
}

bool looks_like_number(const std::string& s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t int_digits = digits_at(s, i);
  i += int_digits;
  size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    frac_digits = digits_at(s, i);
    i += frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t exp_digits = digits_at(s, i);
    if (exp_digits == 0) return false;
    i += exp_digits;
  }
  return i == s.size();
}

std::optional<double> number_from_text(const std::string& s) {
  if (!looks_like_number(s)) return std::nullopt;
  const char* begin = s.data() + (s[0] == '+' ? 1 : 0);
  double value = 0.0;
  const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

bool is_bool_word(const std::string& s) {
  static const char* kWords[] = {"true", "True", "TRUE", "false", "False", "FALSE"};
  return std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords);
}

// Words a YAML 1.1 reader (yaml-cpp's as<bool>, PyYAML) takes for a boolean or null: a string
// spelled like one is quoted when written, so that no reader mistakes it.
bool is_reserved_word(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* kWords[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"};
  return std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords);
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* kHex = "0123456789abcdef";
          out += "\\x";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

bool is_plain_scalar(const YAML::Node& node) {
  if (!node.IsScalar()) return false;
  const std::string& tag = node.Tag();
  return tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
         tag == "tag:yaml.org,2002:bool";
}

std::optional<double> parse_number(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  return number_from_text(node.Scalar());
}

std::optional<int64_t> parse_integer(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  const std::string& s = node.Scalar();
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec == std::errc() && end == s.data() + s.size() && begin != end) return value;
  const std::optional<double> d = number_from_text(s);
  if (d && std::abs(*d) < kMaxExactInteger && std::floor(*d) == *d) return static_cast<int64_t>(*d);
  return std::nullopt;
}

std::optional<bool> parse_bool(const YAML::Node& node) {
  if (!is_plain_scalar(node)) return std::nullopt;
  const std::string& s = node.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::string describe_value(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return node.size() == 1 ? "a list of 1 item" : "a list of " + std::to_string(node.size()) + " items";
  if (node.IsMap()) return "a map";
  std::string s = node.Scalar();
  const bool cut = s.size() > kMaxDescribedChars;
  if (cut) s = s.substr(0, kMaxDescribedChars);
  if (is_plain_scalar(node) && !cut && (looks_like_number(s) || is_bool_word(s))) return s;
  std::string out = quoted(s);
  if (cut) out.insert(out.size() - 1, "...");
  return out;
}

std::string format_number(double value) {
  // Shortest round-trip digits; fixed notation for everyday magnitudes (0.0005 rather than
  // 5e-04), scientific with a trimmed exponent otherwise (1e-6), and a ".0" on integral
  // values so that a number field reads as one.
  const double magnitude = std::abs(value);
  const bool fixed = magnitude == 0 || (magnitude >= kMinFixed && magnitude < kMaxFixed);
  char buf[400];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value,
                                       fixed ? std::chars_format::fixed : std::chars_format::scientific);
  if (ec != std::errc()) return std::to_string(value);
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s.find('.') == std::string::npos ? s + ".0" : s;
  const std::string exponent = s.substr(e + 1);  // "-06", "+20"
  size_t k = (exponent[0] == '+' || exponent[0] == '-') ? 1 : 0;
  while (k + 1 < exponent.size() && exponent[k] == '0') ++k;
  return s.substr(0, e) + "e" + (exponent[0] == '-' ? "-" : "") + exponent.substr(k);
}

std::string format_string(const std::string& s) {
  if (s.empty() || is_reserved_word(s) || looks_like_number(s)) return quoted(s);
  // A conservative set of characters that never start or change YAML structure; the first
  // character is further kept off '-', '.' (".inf") and digits.
  const auto safe = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '-' || c == '.' ||
           c == '/' || c == '{' || c == '}';
  };
  const char first = s[0];
  const bool first_ok = (first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '_' || first == '/';
  if (first_ok && std::all_of(s.begin(), s.end(), safe)) return s;
  return quoted(s);
}

}  // namespace tarn::config
