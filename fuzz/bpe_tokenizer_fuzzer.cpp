// Fuzzes the byte-level BPE tokenizer's loaders (data/byte_level_bpe.cpp) and the tokenizers
// they load. An input is up to three parts separated by NUL bytes, A \0 B \0 TEXT, used as:
//   1. tokenizer.json = A: ByteLevelBpe::from_tokenizer_json, as Tokenizer::load reads it;
//   2. vocab.json = A and merges.txt = B (scratch files): ByteLevelBpe::from_files with BART's
//      specials, as `tarn import` reads a folder without tokenizer.json.
// Each tokenizer that loads encodes a few fixed strings and TEXT (its first 256 bytes) and
// decodes the ids: the text must be valid UTF-8, and the input itself where the input is valid
// UTF-8 and holds no added token that strips spaces. Its tokenizer.json, which import writes, must load
// back to a tokenizer that gives the same ids. Decoding an id past the vocabulary must throw.
//
// Expected outcomes: a tokenizer, or tarn::Error naming the file and the problem. Anything else
// (a crash, a sanitizer report, another exception, a hang, a property above broken) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_level_bpe.h"
#include "framework/io/utf8.h"
#include "fuzz/fuzz_files.h"
#include "kernels/check.h"

namespace {

using tarn::ByteLevelBpe;

constexpr size_t kTextBytes = 256;  // of TEXT: encoding is not what is fuzzed, loading is

// Spaces, newlines, digits, contractions, accents, CJK, emoji, added tokens and bytes that are
// not UTF-8.
const std::vector<std::string> kFixed = {"", "Hello world", " the cat's 3.14  mat\n\tx", "café naïve 日本語 😀 👍🏽",
                                         "<s>a</s> <mask> b<pad><unk>", "\xC3\x28 \xFF bytes", "\xE2\x80\xA8  \xC2\x85"};

[[noreturn]] void fail(const std::string& what, std::string_view text, const std::vector<int32_t>& ids) {
  std::fprintf(stderr, "%s\ntext (%zu bytes): %.*s\nids:", what.c_str(), text.size(), static_cast<int>(text.size()),
               text.data());
  for (int32_t id : ids) std::fprintf(stderr, " %d", id);
  std::fprintf(stderr, "\n");
  std::abort();
}

void exercise(const ByteLevelBpe& t, std::string_view text) {
  // An added token that strips spaces drops them from the text where it occurs.
  bool strips = false;
  for (const ByteLevelBpe::Special& s : t.specials())
    strips = strips || ((s.lstrip || s.rstrip) && text.find(s.content) != std::string_view::npos);
  const std::vector<int32_t> ids = t.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) fail("encode gave an id outside the vocabulary", text, ids);
  const std::string back = t.decode(ids, {});
  if (!tarn::is_valid_utf8(back)) fail("decode gave text that is not UTF-8: " + back, text, ids);
  if (!strips && tarn::is_valid_utf8(text) && back != text) fail("decode(encode(text)) is not text: " + back, text, ids);
  t.decode(ids, {0, 1, 2});
}

void check(const ByteLevelBpe& t, std::string_view text) {
  for (const std::string& s : kFixed) exercise(t, s);
  exercise(t, text);
  bool threw = false;
  try {
    t.decode({t.vocab_size()}, {});
  } catch (const tarn::Error&) {
    threw = true;
  }
  if (!threw) fail("decoding the id vocab_size() did not throw", "", {t.vocab_size()});
  // What import writes and Tokenizer::load reads back.
  const std::string written = t.to_tokenizer_json();
  try {
    const ByteLevelBpe u = ByteLevelBpe::from_tokenizer_json(written, "tokenizer.json (written back)");
    for (const std::string_view s : {std::string_view(kFixed[2]), std::string_view(kFixed[3]),
                                     std::string_view(kFixed[4]), text})
      if (u.encode(s) != t.encode(s)) fail("the tokenizer.json written back encodes differently", s, t.encode(s));
  } catch (const tarn::Error& e) {
    std::fprintf(stderr, "to_tokenizer_json wrote what from_tokenizer_json rejects: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul1 = input.find('\0');
  const std::string_view a = input.substr(0, nul1);
  std::string_view b, text;
  if (nul1 != std::string_view::npos) {
    const size_t nul2 = input.find('\0', nul1 + 1);
    b = input.substr(nul1 + 1, nul2 == std::string_view::npos ? std::string_view::npos : nul2 - nul1 - 1);
    if (nul2 != std::string_view::npos) text = input.substr(nul2 + 1, kTextBytes);
  }
  try {
    check(ByteLevelBpe::from_tokenizer_json(a, "tokenizer.json"), text);
  } catch (const tarn::Error&) {
  }
  try {
    const std::string vocab = tarn::fuzz::write_scratch("vocab.json", std::string(a));
    const std::string merges = tarn::fuzz::write_scratch("merges.txt", std::string(b));
    check(ByteLevelBpe::from_files(vocab, merges, {{"<s>"}, {"<pad>"}, {"</s>"}, {"<unk>"}, {"<mask>", 0, true}}),
          text);
  } catch (const tarn::Error&) {
  }
  return 0;
}
