#include "framework/config/config_error.h"

namespace tarn {
namespace {

// A long list of issues usually means one root cause (a file of another format, a shifted
// indentation); the first ones are what the reader needs.
constexpr size_t kMaxIssuesInMessage = 20;

std::string join_issues(const std::vector<ConfigIssue>& issues) {
  std::string out;
  for (size_t i = 0; i < issues.size() && i < kMaxIssuesInMessage; ++i) {
    if (i) out += '\n';
    out += issues[i].str();
  }
  if (issues.size() > kMaxIssuesInMessage) {
    out += str_cat("\n... and ", issues.size() - kMaxIssuesInMessage, " more problems");
  }
  return out;
}

}  // namespace

std::string ConfigOrigin::str() const {
  if (line > 0 && !is_override()) return str_cat(source, ":", line);
  return source;
}

const ConfigOrigin* nearest_origin(const std::map<std::string, ConfigOrigin>& origins, const std::string& path) {
  std::string p = path;
  while (!p.empty()) {
    const auto it = origins.find(p);
    if (it != origins.end()) return &it->second;
    const size_t dot = p.rfind('.');
    p = dot == std::string::npos ? "" : p.substr(0, dot);
  }
  return nullptr;
}

std::string ConfigIssue::str() const {
  std::string out = origin.str();
  if (!key.empty()) out += (origin.is_override() ? " " : ": ") + key;
  if (out.empty()) return message;
  return out + ": " + message;
}

ConfigError::ConfigError(std::vector<ConfigIssue> issues) : Error(join_issues(issues)), issues_(std::move(issues)) {}

}  // namespace tarn
