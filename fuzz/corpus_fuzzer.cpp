// Fuzzes the corpus readers (data/corpus_reader.cpp, line_reader.cpp, wordnet_corpus.cpp): the
// input is one corpus file, read as plain text lines (denoising), as source<TAB>target pairs
// (data.kind: pairs) and as a WordNet data file (tarn prepare-corpus).
//
// Expected outcomes: the lines kept (bad ones counted as skips), or tarn::Error naming the file
// (an empty file, no usable line). Anything else (a crash, a sanitizer report, another
// exception) is a finding.
#include <cstdint>
#include <string>

#include "data/corpus_reader.h"
#include "data/wordnet_corpus.h"
#include "fuzz/fuzz_files.h"
#include "kernels/check.h"

namespace {

// read_wordnet wants all four data files; the input is data.noun, the others one valid line.
void read_as_wordnet(const uint8_t* data, size_t size) {
  static const bool others = [] {
    const std::string line = "00001740 03 n 01 entity 0 000 | that which is perceived; \"an example\"\n";
    for (const char* name : {"data.verb", "data.adj", "data.adv"}) tarn::fuzz::write_scratch(name, line);
    return true;
  }();
  (void)others;
  tarn::fuzz::write_scratch("data.noun", data, size);
  tarn::read_wordnet(tarn::fuzz::scratch_dir());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tarn::fuzz::write_scratch("corpus.txt", data, size);
  try {
    tarn::ReadStats stats;
    tarn::read_text_lines({path}, &stats);
    stats.summary();
  } catch (const tarn::Error&) {
  }
  try {
    tarn::ReadStats stats;
    tarn::read_tsv_pairs({path}, &stats);
  } catch (const tarn::Error&) {
  }
  try {
    read_as_wordnet(data, size);
  } catch (const tarn::Error&) {
  }
  tarn::split_gloss(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
