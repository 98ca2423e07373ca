#include "app/word_errors.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace tarn::app {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Levenshtein distance between two word sequences. One row of the dynamic programme:
// row[j] = distance between the first i words of h and the first j of r.
int64_t edit_distance(const std::vector<std::string>& h, const std::vector<std::string>& r) {
  std::vector<int64_t> row(r.size() + 1);
  for (size_t j = 0; j <= r.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= h.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= r.size(); ++j) {
      const int64_t substitute = diagonal + (h[i - 1] == r[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[r.size()];
}

}  // namespace

int64_t word_edit_distance(const std::string& hypothesis, const std::string& reference) {
  return edit_distance(words(hypothesis), words(reference));
}

void WordErrors::add(const std::string& hypothesis, const std::string& reference) {
  const std::vector<std::string> r = words(reference);  // split once: for the distance and the count
  edits += edit_distance(words(hypothesis), r);
  reference_words += static_cast<int64_t>(r.size());
}

double WordErrors::rate() const {
  return reference_words > 0 ? static_cast<double>(edits) / static_cast<double>(reference_words) : 0.0;
}

}  // namespace tarn::app
