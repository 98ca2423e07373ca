#pragma once
// Helpers shared by the tests in tests/io: a scratch folder per test, raw file bytes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace tarn::testing {

// A fresh folder under $TMPDIR (or /tmp), removed when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/tarn_io_test_XXXXXX";
    char* made = ::mkdtemp(templ.data());
    if (!made) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void append_u64_le(std::string& s, uint64_t v) {
  for (int b = 0; b < 8; ++b) s += static_cast<char>((v >> (8 * b)) & 0xFF);
}

inline uint64_t u64_le(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(s[at + b]);
  return v;
}

// The message of the tarn::Error that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const tarn::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tarn::testing

#define EXPECT_ERROR_CONTAINS(stmt, text)                                         \
  do {                                                                            \
    const std::string tarn_msg_ = ::tarn::testing::error_of([&] { stmt; });       \
    EXPECT_NE(tarn_msg_, "") << "no tarn::Error from " #stmt;                     \
    EXPECT_NE(tarn_msg_.find(text), std::string::npos)                            \
        << "message: " << tarn_msg_ << "\nexpected to contain: " << (text);       \
  } while (0)
