#include "data/line_reader.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "framework/io/utf8.h"
#include "kernels/check.h"

namespace tarn {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

}  // namespace

void ReadStats::warn(std::string message) {
  if (warnings.size() < kMaxReadWarnings) warnings.push_back(std::move(message));
}

std::string ReadStats::summary() const {
  return str_cat("read ", lines, " lines: kept ", kept, ", skipped ", empty, " empty, ", invalid_utf8,
                 " invalid UTF-8, ", malformed, " malformed");
}

void for_each_line(const std::string& path, ReadStats& stats, const LineVisitor& visit) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  TARN_CHECK(std::filesystem::exists(status), path, ": corpus file not found");
  TARN_CHECK(std::filesystem::is_regular_file(status), path, ": not a regular file");
  TARN_CHECK(std::filesystem::file_size(path, ec) > 0 && !ec, path, ": corpus file is empty");
  std::ifstream in(path, std::ios::binary);
  TARN_CHECK(in.is_open(), path, ": cannot open (", std::strerror(errno), ")");

  const ReadStats before = stats;  // to report this file's own skips if it yields nothing
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    ++stats.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) {
      ++stats.empty;
      continue;
    }
    if (line.size() > kMaxLineBytes) {
      ++stats.malformed;
      stats.warn(str_cat(path, ":", number, ": skipped: the line is ", line.size(), " bytes, over the ", kMaxLineBytes,
                         " a line may have"));
      continue;
    }
    const size_t bad = first_invalid_utf8(line);
    if (bad != line.size()) {
      ++stats.invalid_utf8;
      stats.warn(str_cat(path, ":", number, ": skipped: invalid UTF-8 at byte ", bad + 1));
      continue;
    }
    if (visit(number, line)) {
      ++stats.kept;
    } else {
      ++stats.malformed;  // the visitor has warned with the reason
    }
  }
  TARN_CHECK(!in.bad(), path, ": read error after line ", number);
  TARN_CHECK(stats.kept > before.kept, path, ": no usable lines (", stats.empty - before.empty, " empty, ",
             stats.invalid_utf8 - before.invalid_utf8, " invalid UTF-8, ", stats.malformed - before.malformed,
             " malformed)");
}

}  // namespace tarn
