#pragma once
// Scratch files for fuzz targets whose loader takes a path: one folder per fuzzer process
// (under $TMPDIR, removed at exit), rewritten for every input. A path entry point is what the
// trainer and the CLI call, so the fuzzer sees the same code as a user's file would.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tarn::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/tarn-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      std::perror("tarn fuzz: mkdtemp");
      std::abort();
    }
    static const std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Writes `size` bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("tarn fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

inline std::string write_scratch(const std::string& name, const std::string& text) {
  return write_scratch(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Where a fuzzer writes the files its seeds were made from, when TARN_FUZZ_WRITE_SEEDS names a
// folder ("" otherwise): seeds written by tarn's own writers, not by hand (fuzz/README.md).
inline std::string seeds_out_dir() {
  const char* dir = std::getenv("TARN_FUZZ_WRITE_SEEDS");
  return dir ? dir : "";
}

}  // namespace tarn::fuzz
