#include "app/word_errors.h"

#include <sstream>
#include <vector>

#include "framework/edit_distance.h"

namespace tarn::app {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
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
