#pragma once
// Helpers of the config tests: the shipped recipes, a scratch folder, and running a loader
// expected to fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>
#include <string>
#include <vector>

#include "framework/config/config_error.h"

namespace tarn::testing {

inline std::string source_path(const std::string& relative) { return std::string(TARN_SOURCE_DIR) + "/" + relative; }

// Every *.yaml in a folder of the source tree, sorted.
inline std::vector<std::string> yaml_files(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(source_path(folder))) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh folder, removed with its contents at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("tarn_config_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((path_ / name).parent_path());
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs `f`, expecting a ConfigError; returns its issues (empty, with a test failure, if none).
inline std::vector<ConfigIssue> config_issues(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.issues();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ConfigError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected a ConfigError, nothing was thrown";
  return {};
}

inline std::string first_issue(const std::function<void()>& f) {
  const std::vector<ConfigIssue> issues = config_issues(f);
  return issues.empty() ? "" : issues.front().str();
}

}  // namespace tarn::testing
