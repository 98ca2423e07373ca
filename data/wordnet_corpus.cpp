#include "data/wordnet_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "data/line_reader.h"
#include "kernels/check.h"

namespace tarn {
namespace {

constexpr const char* kDataFiles[] = {"data.noun", "data.verb", "data.adj", "data.adv"};
constexpr std::string_view kGlossMarker = "| ";
constexpr std::string_view kLicensePrefix = "  ";  // the license header lines start with two spaces
constexpr uint64_t kFnvOffset = 0xCBF29CE484222325ull, kFnvPrime = 0x100000001B3ull;
constexpr uint64_t kPercent = 100;

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Trims, drops stray separators, and drops a quote at either end that has no partner (WordNet
// quotes unevenly now and then); balanced quotes, as in 'the phrase "make strides"', stay.
std::string clean(std::string_view s) {
  s = trim(s);
  while (!s.empty() && s.front() == ';') s = trim(s.substr(1));
  while (!s.empty() && s.back() == ';') s = trim(s.substr(0, s.size() - 1));
  const auto quotes = std::count(s.begin(), s.end(), '"');
  if (quotes % 2 == 1 && !s.empty()) {
    if (s.back() == '"') {
      s = trim(s.substr(0, s.size() - 1));
    } else if (s.front() == '"') {
      s = trim(s.substr(1));
    }
  }
  return std::string(s);
}

// The gloss's ';'-separated parts, ignoring ';' inside quotes.
std::vector<std::string_view> split_parts(std::string_view gloss) {
  std::vector<std::string_view> parts;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < gloss.size(); ++i) {
    if (gloss[i] == '"') quoted = !quoted;
    if (gloss[i] == ';' && !quoted) {
      parts.push_back(gloss.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(gloss.substr(start));
  return parts;
}

// The text of a quoted example: up to the closing quote (what follows is an attribution).
std::string_view example_text(std::string_view part) {
  part = trim(part);
  if (!part.empty() && part.front() == '"') part.remove_prefix(1);
  const size_t close = part.find('"');
  return close == std::string_view::npos ? part : part.substr(0, close);
}

// A definition part may carry an example after ':"', ': "' or ', "' (WordNet is not
// consistent). Returns the offset of the ':' or ',', or npos.
size_t inline_example_start(std::string_view part) {
  for (std::string_view sep : {std::string_view(":\""), std::string_view(": \""), std::string_view(", \"")}) {
    const size_t at = part.find(sep);
    if (at != std::string_view::npos) return at;
  }
  return std::string_view::npos;
}

void add_if_nonempty(std::vector<std::string>& out, std::string s) {
  if (!s.empty()) out.push_back(std::move(s));
}

}  // namespace

std::vector<std::string> split_gloss(std::string_view gloss) {
  std::string definition;
  std::vector<std::string> examples;
  bool in_examples = false;  // once an example starts, later parts are examples too
  for (std::string_view part : split_parts(gloss)) {
    const std::string_view t = trim(part);
    if (t.empty()) continue;
    if (in_examples || t.front() == '"') {
      in_examples = true;
      add_if_nonempty(examples, clean(example_text(t)));
      continue;
    }
    std::string_view def = t;
    const size_t inline_at = inline_example_start(t);
    if (inline_at != std::string_view::npos) {
      def = t.substr(0, inline_at);
      add_if_nonempty(examples, clean(example_text(t.substr(inline_at + 1))));
      in_examples = true;
    }
    const std::string d = clean(def);
    if (!d.empty()) definition += (definition.empty() ? "" : "; ") + d;
  }
  std::vector<std::string> out;
  add_if_nonempty(out, definition);
  for (auto& e : examples) out.push_back(std::move(e));
  return out;
}

WordNetText read_wordnet(const std::string& wordnet_dir) {
  WordNetText text;
  std::unordered_set<std::string> seen;
  ReadStats stats;
  for (const char* name : kDataFiles) {
    const std::string path = (std::filesystem::path(wordnet_dir) / name).string();
    for_each_line(path, stats, [&](int64_t number, std::string_view line) {
      if (line.substr(0, kLicensePrefix.size()) == kLicensePrefix) return true;
      const size_t bar = line.find(kGlossMarker);
      if (bar == std::string_view::npos) {
        stats.warn(str_cat(path, ":", number, ": skipped: no gloss (\"| \")"));
        return false;
      }
      ++text.glosses;
      for (auto& piece : split_gloss(line.substr(bar + kGlossMarker.size()))) {
        if (seen.insert(piece).second) {
          text.lines.push_back(std::move(piece));
        } else {
          ++text.duplicates;
        }
      }
      return true;
    });
  }
  return text;
}

Split split_of(std::string_view line) {
  uint64_t h = kFnvOffset;
  for (unsigned char c : line) h = (h ^ c) * kFnvPrime;
  const uint64_t bucket = h % kPercent;
  if (bucket < static_cast<uint64_t>(kTestPercent)) return Split::kTest;
  if (bucket < static_cast<uint64_t>(kTestPercent + kValidPercent)) return Split::kValid;
  return Split::kTrain;
}

std::string PreparedCorpus::summary() const {
  std::string s = str_cat("WordNet corpus: ", glosses, " glosses, ", duplicates, " duplicate lines dropped\n");
  for (const SplitStats* sp : {&train, &valid, &test})
    s += str_cat("  ", sp->path, ": ", sp->lines, " lines, mean ", sp->mean_words, " words / ", sp->mean_chars,
                 " characters per line\n");
  return s;
}

PreparedCorpus prepare_wordnet_corpus(const std::string& out_dir, const std::string& wordnet_dir) {
  const WordNetText text = read_wordnet(wordnet_dir);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  TARN_CHECK(!ec, out_dir, ": cannot create folder (", ec.message(), ")");

  PreparedCorpus result;
  result.glosses = text.glosses;
  result.duplicates = text.duplicates;
  struct Out {
    SplitStats* stats;
    std::ofstream file;
    int64_t chars = 0, words = 0;
  } outs[3] = {{&result.train, {}}, {&result.valid, {}}, {&result.test, {}}};
  const char* names[3] = {"train.txt", "valid.txt", "test.txt"};
  for (int s = 0; s < 3; ++s) {
    outs[s].stats->path = (std::filesystem::path(out_dir) / names[s]).string();
    outs[s].file.open(outs[s].stats->path, std::ios::binary | std::ios::trunc);
    TARN_CHECK(outs[s].file.is_open(), outs[s].stats->path, ": cannot open for writing");
  }
  for (const auto& line : text.lines) {
    Out& o = outs[static_cast<int>(split_of(line))];
    o.file << line << '\n';
    ++o.stats->lines;
    o.chars += static_cast<int64_t>(line.size());
    bool in_word = false;
    for (char c : line) {
      const bool space = c == ' ' || c == '\t';
      o.words += !space && !in_word;
      in_word = !space;
    }
  }
  for (auto& o : outs) {
    o.file.close();
    TARN_CHECK(o.file.good(), o.stats->path, ": write failed");
    const double n = o.stats->lines > 0 ? static_cast<double>(o.stats->lines) : 1.0;
    o.stats->mean_chars = static_cast<double>(o.chars) / n;
    o.stats->mean_words = static_cast<double>(o.words) / n;
  }
  return result;
}

}  // namespace tarn
