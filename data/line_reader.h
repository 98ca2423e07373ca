#pragma once
// Reads a corpus file line by line and applies the rules every corpus format shares: a missing,
// unreadable or empty file is an error naming it; blank lines are skipped; lines that are not
// valid UTF-8 or longer than kMaxLineBytes are skipped and counted, the first few with a warning
// naming file and line.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tarn {

// How many skip warnings a read keeps (the counts always cover every line).
constexpr size_t kMaxReadWarnings = 10;
// Lines longer than this are skipped as malformed, with a warning: an example is a sentence or
// a paragraph, and a runaway line (a binary file, a missing newline) would otherwise cost
// memory far beyond its use after tokenisation. The tokenizer's trainer takes the same bound.
constexpr size_t kMaxLineBytes = 65536;

struct ReadStats {
  int64_t lines = 0;         // physical lines seen
  int64_t kept = 0;          // lines that became corpus entries
  int64_t empty = 0;         // blank or whitespace-only: skipped silently
  int64_t invalid_utf8 = 0;  // skipped with a warning
  int64_t malformed = 0;     // format-specific rejects (TSV: not "source<TAB>target"), with a warning
  std::vector<std::string> warnings;  // "file:line: why", the first kMaxReadWarnings only

  void warn(std::string message);
  int64_t skipped() const { return empty + invalid_utf8 + malformed; }
  // One line for logs: "read 1,000 lines: kept 990, skipped 6 empty, 3 invalid UTF-8, 1 malformed".
  std::string summary() const;
};

// Called for each candidate line (1-based number, trailing '\r' removed, valid UTF-8, not
// blank). Returns false to reject it; the callee then counts it in stats.malformed and warns.
using LineVisitor = std::function<bool(int64_t line_number, std::string_view line)>;

// Visits the lines of `path`, adding to `stats`. Throws tarn::Error naming the file when it
// is missing, not a regular file, unreadable, empty, or yields no accepted line.
void for_each_line(const std::string& path, ReadStats& stats, const LineVisitor& visit);

}  // namespace tarn
