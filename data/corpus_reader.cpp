#include "data/corpus_reader.h"

#include "kernels/check.h"

namespace tarn {
namespace {

bool is_blank(std::string_view s) { return s.find_first_not_of(" \t\v\f") == std::string_view::npos; }

}  // namespace

std::vector<std::string> read_text_lines(const std::vector<std::string>& paths, ReadStats* stats) {
  TARN_CHECK(!paths.empty(), "read_text_lines: no corpus files given");
  ReadStats local;
  ReadStats& st = stats ? *stats : local;
  std::vector<std::string> lines;
  for (const auto& path : paths) {
    for_each_line(path, st, [&](int64_t, std::string_view line) {
      lines.emplace_back(line);
      return true;
    });
  }
  return lines;
}

std::vector<TextPair> read_tsv_pairs(const std::vector<std::string>& paths, ReadStats* stats) {
  TARN_CHECK(!paths.empty(), "read_tsv_pairs: no corpus files given");
  ReadStats local;
  ReadStats& st = stats ? *stats : local;
  std::vector<TextPair> pairs;
  for (const auto& path : paths) {
    for_each_line(path, st, [&](int64_t number, std::string_view line) {
      const size_t tab = line.find('\t');
      const char* why = nullptr;
      if (tab == std::string_view::npos) {
        why = "no tab between source and target";
      } else if (line.find('\t', tab + 1) != std::string_view::npos) {
        why = "more than one tab (expected exactly source<TAB>target)";
      } else if (is_blank(line.substr(0, tab)) || is_blank(line.substr(tab + 1))) {
        why = "empty source or target";
      }
      if (why) {
        st.warn(str_cat(path, ":", number, ": skipped: ", why));
        return false;
      }
      pairs.push_back({std::string(line.substr(0, tab)), std::string(line.substr(tab + 1))});
      return true;
    });
  }
  return pairs;
}

}  // namespace tarn
