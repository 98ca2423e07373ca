#pragma once
// ConfigError: a user error in a recipe file or a --set override (the CLI maps it to exit code
// 2). Its message lists every problem found, one per line, in the form of STYLE.md:
//   recipes/small.yaml:14: optimizer.lr: expected a positive number, got "fast"
//   --set training.max_steps: expected a non-negative integer, got -5
#include <map>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace tarn {

// Where a value came from: a line of a file, or the command line.
struct ConfigOrigin {
  static constexpr const char* kOverride = "--set";

  std::string source;  // the file as it was named (not made absolute), or kOverride
  int line = 0;        // 1-based; 0 when unknown (and always for overrides)

  static ConfigOrigin command_line() { return {kOverride, 0}; }
  bool is_override() const { return source == kOverride; }
  std::string str() const;  // "recipes/tiny.yaml:14", "recipes/tiny.yaml" (no line), "--set"
};

// Where dotted key `path` was set, from `origins` (key path -> origin): its own entry, else its
// nearest given ancestor's ("a.b.c", then "a.b", then "a"); nullptr when none was given.
const ConfigOrigin* nearest_origin(const std::map<std::string, ConfigOrigin>& origins, const std::string& path);

// One element of an `entries` list, kept as flow YAML ("linear", "{kind: hybrid, window: 128}")
// with where it was given: the caller parses each entry against a schema of its own once every
// source is applied (an entry may inherit settings given after it), and reports its issues at
// `origin`.
struct YamlEntry {
  std::string text;
  ConfigOrigin origin;
  bool operator==(const YamlEntry& o) const { return text == o.text; }
};

struct ConfigIssue {
  ConfigOrigin origin;
  std::string key;      // dotted path ("optimizer.lr", "optimizer.betas[1]"); empty for the whole file
  std::string message;  // "expected a positive number, got \"fast\""
  // "file:line: key: message", "file: key: message" (no line), "--set key: message".
  std::string str() const;
};

class ConfigError : public Error {
 public:
  explicit ConfigError(std::vector<ConfigIssue> issues);
  ConfigError(const ConfigOrigin& origin, const std::string& key, const std::string& message)
      : ConfigError(std::vector<ConfigIssue>{{origin, key, message}}) {}
  // Every problem found, in the order found (the first is the one a reader fixes first).
  const std::vector<ConfigIssue>& issues() const { return issues_; }

 private:
  std::vector<ConfigIssue> issues_;
};

}  // namespace tarn
