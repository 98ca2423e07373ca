#pragma once
// Strict reading and writing of YAML scalars for the schema engine. YAML 1.2 core-schema
// typing: only a plain (unquoted, untagged) scalar can be a number or a boolean, so `lr: "3e-4"`
// is a string; `.inf`, `.nan`, hex and octal are refused. Written values read back exactly
// (numbers in the shortest form that round-trips).
#include <cstdint>
#include <optional>
#include <string>

namespace YAML {
class Node;
}

namespace tarn::config {

// A plain scalar, or one tagged !!int / !!float / !!bool (so a number can be typed explicitly).
bool is_plain_scalar(const YAML::Node& node);

// [-+]?(digits[.digits]|.digits)([eE][-+]?digits)?, finite.
std::optional<double> parse_number(const YAML::Node& node);
// Digits with an optional sign, or a number above with an integral value below 2^53 ("1e4").
std::optional<int64_t> parse_integer(const YAML::Node& node);
// true / false (also True, TRUE, False, FALSE), YAML 1.2's booleans.
std::optional<bool> parse_bool(const YAML::Node& node);

// How a value is named after "got" in messages: -3, 0.5, true, "fast" (quoted unless it reads
// as a number or boolean), a list, a map, nothing (an empty value).
std::string describe_value(const YAML::Node& node);

// Scalars for emitted YAML.
std::string format_number(double value);   // shortest text that parses back to the same double
std::string format_string(const std::string& s);  // plain when unambiguous, else double-quoted

}  // namespace tarn::config
