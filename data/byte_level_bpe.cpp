#include "data/byte_level_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <climits>
#include <queue>

#include "framework/io/atomic_file.h"
#include "framework/io/json.h"
#include "kernels/check.h"

namespace tarn {
namespace {

// GPT-2's pre-tokenisation pattern (openai/gpt-2 encoder.py, HuggingFace tokenizers'
// ByteLevel pre-tokenizer). `tokenizers` matches it with Oniguruma, whose \s in Unicode mode is
// U+0009-000D, U+0085 and the separators (Zs, Zl, Zp); PCRE2's \s leaves out U+0085, so the
// class is spelled out.
#define TARN_WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TARN_WS "\\p{L}\\p{N}]+|[" TARN_WS "]+(?![^" TARN_WS
    "])|[" TARN_WS "]+";
#undef TARN_WS

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 onwards in byte order, so every byte is one printable character.
struct ByteMap {
  std::array<std::string, 256> to_char;              // byte -> its character, UTF-8
  std::unordered_map<std::string, uint8_t> to_byte;  // and back
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(to_char[b], printable ? static_cast<uint32_t>(b) : next++);
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
}

bool is_space_char(std::string_view s, size_t at, size_t* len) {
  // Rust's char::is_whitespace for the strip flags of added tokens: White_Space.
  static const uint32_t kSpaces[] = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001,
                                     0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  const auto lead = static_cast<unsigned char>(s[at]);
  const size_t n = std::min(utf8_length(lead), s.size() - at);
  uint32_t cp = n == 1 ? lead : lead & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[at + i]) & 0x3F);
  *len = n;
  return std::find(std::begin(kSpaces), std::end(kSpaces), cp) != std::end(kSpaces);
}

// Appends `bytes` as Rust's String::from_utf8_lossy does, which tokenizers' ByteLevel decoder
// uses: each maximal subpart of an ill-formed sequence (Unicode 15, 3.9, "U+FFFD Substitution of
// Maximal Subparts") becomes one U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view bytes) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
  for (size_t i = 0; i < bytes.size();) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    size_t need = 0;                 // continuation bytes after the lead
    unsigned lo = 0x80, hi = 0xBF;   // the range of the second byte
    if (b0 < 0x80) {
      out += static_cast<char>(b0);
      ++i;
      continue;
    } else if (in(b0, 0xC2, 0xDF)) {
      need = 1;
    } else if (in(b0, 0xE0, 0xEF)) {
      need = 2;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (in(b0, 0xF0, 0xF4)) {
      need = 3;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    } else {  // a continuation byte, C0, C1 or F5-FF: never valid here
      out += kReplacement;
      ++i;
      continue;
    }
    size_t good = 1;  // bytes of a valid prefix so far
    while (good <= need && i + good < bytes.size()) {
      const auto c = static_cast<unsigned char>(bytes[i + good]);
      if (good == 1 ? !in(c, lo, hi) : !in(c, 0x80, 0xBF)) break;
      ++good;
    }
    if (good == need + 1) {
      out.append(bytes.substr(i, good));
    } else {
      out += kReplacement;
    }
    i += good;
  }
}

}  // namespace

struct ByteLevelBpe::Regex {
  pcre2_code* code = nullptr;
  Regex() {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof msg);
      TARN_ASSERT(false, "byte-level BPE: the pre-tokenisation pattern does not compile at ", offset, ": ",
                  reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is absent
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

void ByteLevelBpe::build(std::unordered_map<std::string, int32_t> vocab,
                         std::vector<std::pair<std::string, std::string>> merges, std::vector<Special> specials,
                         const std::string& source) {
  int32_t size = 0;
  for (const auto& [tok, id] : vocab) {
    TARN_CHECK(id >= 0, source, ": token ", json::quote(tok), " has the negative id ", id);
    size = std::max(size, id + 1);
  }
  for (const Special& s : specials) {
    TARN_CHECK(!s.content.empty(), source, ": an added token with empty content");
    TARN_CHECK(s.id >= 0, source, ": added token ", s.content, " has the negative id ", s.id);
    size = std::max(size, s.id + 1);
  }
  id_to_token_.assign(static_cast<size_t>(size), std::string());
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (const auto& [tok, id] : vocab) {
    TARN_CHECK(!seen[id] || id_to_token_[id] == tok, source, ": id ", id, " is given to both ",
               id_to_token_[id], " and ", tok);
    id_to_token_[id] = tok;
    seen[id] = true;
  }
  for (const Special& s : specials) {
    TARN_CHECK(!seen[s.id] || id_to_token_[s.id] == s.content, source, ": added token ", s.content, " has id ", s.id,
               ", which the vocabulary gives to ", id_to_token_[s.id]);
    // One id per token: an added token that the vocabulary (or an earlier added token) gives
    // another id would leave that id a token the text never encodes to, and a tokenizer.json
    // written from it would lose one of the two.
    const auto other = vocab.find(s.content);
    TARN_CHECK(other == vocab.end() || other->second == s.id, source, ": added token ", s.content, " has id ", s.id,
               ", but ", other->second, " is already its id");
    id_to_token_[s.id] = s.content;
    seen[s.id] = true;
    vocab[s.content] = s.id;
  }
  for (int32_t id = 0; id < size; ++id)
    TARN_CHECK(seen[id], source, ": no token has id ", id, " (ids must run from 0 to ", size - 1, " without gaps)");
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    TARN_CHECK(vocab.count(a) && vocab.count(b) && vocab.count(a + b), source, ": merge ", r + 1, " (", a, " ", b,
               ") joins or makes a token that is not in the vocabulary");
    merge_rank_.emplace(a + " " + b, static_cast<int32_t>(r));  // the first of duplicates ranks
  }
  for (int b = 0; b < 256; ++b)
    TARN_CHECK(vocab.count(byte_map().to_char[b]), source, ": byte ", b, " has no token (",
               byte_map().to_char[b], "): not a byte-level vocabulary");
  token_to_id_ = std::move(vocab);
  merges_ = std::move(merges);
  // Longest first, so that a special that contains another wins where both match.
  std::stable_sort(specials.begin(), specials.end(),
                   [](const Special& x, const Special& y) { return x.content.size() > y.content.size(); });
  specials_ = std::move(specials);
  static const auto regex = std::make_shared<const Regex>();
  regex_ = regex;
}

ByteLevelBpe ByteLevelBpe::from_files(const std::string& vocab_json_path, const std::string& merges_path,
                                      std::vector<Special> specials) {
  const json::Json v = json::parse(read_file(vocab_json_path), vocab_json_path);
  std::unordered_map<std::string, int32_t> vocab;
  for (const auto& [tok, id] : json::members(v, vocab_json_path)) {
    const uint64_t n = json::as_u64(id, vocab_json_path + ": token " + json::quote(tok));
    TARN_CHECK(n < static_cast<uint64_t>(INT32_MAX), vocab_json_path, ": id ", n, " is too large");
    vocab[tok] = static_cast<int32_t>(n);
  }
  const std::string text = read_file(merges_path);
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    TARN_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
               merges_path, ":", line_no, ": expected two tokens separated by one space, got \"", line, "\"");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  // Specials the vocabulary lacks are left out (a vocabulary without <mask>, say).
  std::vector<Special> present;
  for (Special& s : specials) {
    auto it = vocab.find(s.content);
    if (it == vocab.end()) continue;
    s.id = it->second;
    present.push_back(s);
  }
  ByteLevelBpe t;
  t.build(std::move(vocab), std::move(merges), std::move(present), vocab_json_path);
  return t;
}

ByteLevelBpe ByteLevelBpe::from_tokenizer_json(std::string_view text, const std::string& source) {
  const json::Json root = json::parse(text, source);
  const json::Json* model = json::find(root, "model");
  TARN_CHECK(model && model->is_object(), source, ": no \"model\" object: not a tokenizers tokenizer.json");
  auto field_is = [&](const json::Json* obj, const char* section, const char* key, auto&& ok, const char* want) {
    const json::Json* f = obj ? json::find(*obj, key) : nullptr;
    TARN_CHECK(ok(f), source, ": ", section, key, " is ", f ? f->dump() : std::string("absent"), ": tarn reads ",
               want);
  };
  auto null_or_empty = [](const json::Json* f) {
    return !f || f->is_null() || (f->is_string() && json::as_string(*f, "").empty());
  };
  auto null_or_false = [](const json::Json* f) { return !f || f->is_null() || (f->is_boolean() && !json::as_bool(*f, "")); };
  field_is(model, "model.", "type", [](const json::Json* f) { return f && f->is_string() && json::as_string(*f, "") == "BPE"; },
           "byte-level BPE tokenizers only (GPT-2's, BART's, RoBERTa's)");
  field_is(model, "model.", "dropout", [](const json::Json* f) { return !f || f->is_null(); }, "BPE without dropout");
  field_is(model, "model.", "continuing_subword_prefix", null_or_empty, "BPE without subword prefixes");
  field_is(model, "model.", "end_of_word_suffix", null_or_empty, "BPE without word suffixes");
  field_is(model, "model.", "byte_fallback", null_or_false, "byte-level BPE, not byte fallback");
  field_is(model, "model.", "ignore_merges", null_or_false, "BPE that applies its merges to every word");
  field_is(&root, "", "normalizer", [](const json::Json* f) { return !f || f->is_null(); },
           "tokenizers without a normalizer");
  const json::Json* pre = json::find(root, "pre_tokenizer");
  field_is(pre, "pre_tokenizer.", "type",
           [](const json::Json* f) { return f && f->is_string() && json::as_string(*f, "") == "ByteLevel"; },
           "a ByteLevel pre-tokenizer");
  field_is(pre, "pre_tokenizer.", "add_prefix_space", null_or_false, "add_prefix_space false (BART's)");
  field_is(pre, "pre_tokenizer.", "use_regex",
           [](const json::Json* f) { return !f || f->is_null() || (f->is_boolean() && json::as_bool(*f, "")); },
           "GPT-2's pre-tokenisation regex (use_regex true)");
  const json::Json* dec = json::find(root, "decoder");
  field_is(dec, "decoder.", "type",
           [](const json::Json* f) { return f && f->is_string() && json::as_string(*f, "") == "ByteLevel"; },
           "a ByteLevel decoder");

  std::unordered_map<std::string, int32_t> vocab;
  const json::Json* v = json::find(*model, "vocab");
  TARN_CHECK(v && v->is_object(), source, ": model.vocab is not an object");
  for (const auto& [tok, id] : json::members(*v, "model.vocab")) {
    const uint64_t n = json::as_u64(id, source + ": model.vocab " + json::quote(tok));
    TARN_CHECK(n < static_cast<uint64_t>(INT32_MAX), source, ": model.vocab: id ", n, " is too large");
    vocab[tok] = static_cast<int32_t>(n);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const json::Json* m = json::find(*model, "merges");
  TARN_CHECK(m && m->is_array(), source, ": model.merges is not an array");
  for (const json::Json& item : json::items(*m, "model.merges")) {
    const std::string what = source + ": model.merges[" + std::to_string(merges.size()) + "]";
    if (item.is_string()) {  // "a b" (tokenizers before 0.20)
      const std::string& s = json::as_string(item, what);
      const size_t sp = s.find(' ');
      TARN_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                 what, ": expected \"a b\", got ", item.dump());
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {  // ["a", "b"]
      const auto& pair = json::items(item, what);
      TARN_CHECK(pair.size() == 2, what, ": expected two tokens, got ", item.dump());
      merges.emplace_back(json::as_string(pair[0], what), json::as_string(pair[1], what));
    }
  }
  std::vector<Special> specials;
  if (const json::Json* added = json::find(root, "added_tokens"); added && !added->is_null()) {
    for (const json::Json& a : json::items(*added, "added_tokens")) {
      const std::string what = source + ": added_tokens[" + std::to_string(specials.size()) + "]";
      Special s;
      s.content = json::find(a, "content") ? json::as_string(*json::find(a, "content"), what + ".content") : std::string();
      const uint64_t id = json::find(a, "id") ? json::as_u64(*json::find(a, "id"), what + ".id") : UINT64_MAX;
      TARN_CHECK(id < static_cast<uint64_t>(INT32_MAX), what, ": no valid id");
      s.id = static_cast<int32_t>(id);
      auto flag = [&](const char* key) { return json::find(a, key) && json::as_bool(*json::find(a, key), what + "." + key); };
      s.lstrip = flag("lstrip");
      s.rstrip = flag("rstrip");
      TARN_CHECK(!flag("single_word"), what, " (", s.content, "): single_word true: tarn matches added tokens anywhere");
      specials.push_back(s);
    }
  }
  ByteLevelBpe t;
  t.build(std::move(vocab), std::move(merges), std::move(specials), source);
  return t;
}

namespace {

// vocab.json's object, which tokenizer.json's model also holds: token -> id, in id order.
json::Json vocab_object(const std::vector<std::string>& id_to_token) {
  json::Json v = json::Json::object();
  for (size_t id = 0; id < id_to_token.size(); ++id) v[id_to_token[id]] = static_cast<int64_t>(id);
  return v;
}

}  // namespace

std::string ByteLevelBpe::vocab_json() const { return json::dump(vocab_object(id_to_token_)) + "\n"; }

std::string ByteLevelBpe::merges_txt() const {
  std::string s = "#version: 0.2\n";
  for (const auto& [a, b] : merges_) s += a + " " + b + "\n";
  return s;
}

std::string ByteLevelBpe::to_tokenizer_json() const {
  using json::Json;
  std::vector<Special> by_id = specials_;
  std::sort(by_id.begin(), by_id.end(), [](const Special& a, const Special& b) { return a.id < b.id; });
  Json added = Json::array();
  for (const Special& s : by_id)
    added.push_back(Json::object({{"id", static_cast<int64_t>(s.id)},
                                  {"content", s.content},
                                  {"single_word", false},
                                  {"lstrip", s.lstrip},
                                  {"rstrip", s.rstrip},
                                  {"normalized", false},
                                  {"special", true}}));
  // The pre-tokenizer and the decoder: ByteLevel, the space before the text added by the decoder only.
  auto byte_level = [](bool add_prefix_space) {
    return Json::object(
        {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", true}, {"use_regex", true}});
  };
  auto pair = [&](const char* tok, int32_t fallback) {
    const int32_t id = token_to_id(tok);
    return Json::array({tok, static_cast<int64_t>(id >= 0 ? id : fallback)});
  };
  Json merges = Json::array();
  for (const auto& [a, b] : merges_) merges.push_back(a + " " + b);
  const Json root = Json::object(
      {{"version", "1.0"},
       {"truncation", nullptr},
       {"padding", nullptr},
       {"added_tokens", added},
       {"normalizer", nullptr},
       {"pre_tokenizer", byte_level(false)},
       {"post_processor", Json::object({{"type", "RobertaProcessing"},
                                        {"sep", pair("</s>", 2)},
                                        {"cls", pair("<s>", 0)},
                                        {"trim_offsets", true},
                                        {"add_prefix_space", false}})},
       {"decoder", byte_level(true)},
       {"model", Json::object({{"type", "BPE"},
                               {"dropout", nullptr},
                               {"unk_token", nullptr},
                               {"continuing_subword_prefix", ""},
                               {"end_of_word_suffix", ""},
                               {"fuse_unk", false},
                               {"byte_fallback", false},
                               {"vocab", vocab_object(id_to_token_)},
                               {"merges", merges}})}});
  return json::dump(root) + "\n";
}

int32_t ByteLevelBpe::token_to_id(const std::string& token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& ByteLevelBpe::id_to_token(int32_t id) const {
  TARN_CHECK(id >= 0 && id < vocab_size(), "byte-level BPE: id ", id, " outside [0, ", vocab_size(), ")");
  return id_to_token_[static_cast<size_t>(id)];
}

// One pre-token: its bytes as characters, then the lowest-ranked adjacent pair merged, again
// and again (GPT-2's bpe(); every occurrence of the pair, left to right, as tokenizers does).
// GPT-2 rescans the word for each merge, O(n^2) in its length; here the symbols are a linked
// list and the candidate pairs a heap by (rank, position), O(n log n), so that a long word
// without spaces (a base64 blob, a run of digits) does not stall tarn eval. A round merges every
// occurrence of one rank, left to right; the pairs its merges make wait until the round ends,
// so a later rank below this one (a merges file out of order) cannot cut in, as in GPT-2's loop.
void ByteLevelBpe::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  const ByteMap& bm = byte_map();
  const size_t n = bytes.size();
  std::vector<std::string> sym(n);
  std::vector<size_t> prev(n), next(n);  // n: none
  for (size_t i = 0; i < n; ++i) {
    sym[i] = bm.to_char[static_cast<unsigned char>(bytes[i])];
    prev[i] = i == 0 ? n : i - 1;
    next[i] = i + 1;
  }
  using Candidate = std::pair<int32_t, size_t>;  // (rank, left symbol's position)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  std::string key;
  auto rank_of = [&](size_t i) -> int32_t {
    key.assign(sym[i]).append(" ").append(sym[next[i]]);
    const auto it = merge_rank_.find(key);
    return it == merge_rank_.end() ? -1 : it->second;
  };
  for (size_t i = 0; i + 1 < n; ++i)
    if (const int32_t r = rank_of(i); r >= 0) heap.push({r, i});
  std::vector<size_t> made;  // left positions of the pairs this round's merges made
  while (!heap.empty()) {
    const int32_t round = heap.top().first;
    const auto& [a, b] = merges_[static_cast<size_t>(round)];
    while (!heap.empty() && heap.top().first == round) {
      const size_t i = heap.top().second;
      heap.pop();
      // Stale: a merge took this symbol or its right neighbour since the pair was queued.
      if (sym[i].empty() || next[i] >= n || sym[i] != a || sym[next[i]] != b) continue;
      const size_t j = next[i];
      sym[i] += sym[j];
      sym[j].clear();
      next[i] = next[j];
      if (next[i] < n) prev[next[i]] = i;
      if (prev[i] < n) made.push_back(prev[i]);
      made.push_back(i);
    }
    for (size_t i : made)
      if (!sym[i].empty() && next[i] < n)
        if (const int32_t r = rank_of(i); r >= 0) heap.push({r, i});
    made.clear();
  }
  for (size_t i = 0; i < n; i = next[i]) {
    const int32_t id = token_to_id(sym[i]);
    TARN_ASSERT(id >= 0, "byte-level BPE: symbol ", sym[i], " is not in the vocabulary although build() checked");
    out.push_back(id);
  }
}

void ByteLevelBpe::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  TARN_ASSERT(md, "byte-level BPE: out of memory for PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(regex_->code, subject, text.size(), at, 0, md, nullptr);
    if (rc < 0) {  // PCRE2_ERROR_NOMATCH: the rest is bytes no alternative takes (invalid UTF-8)
      encode_word(text.substr(at), out);
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > at) encode_word(text.substr(at, ov[0] - at), out);  // skipped invalid bytes
    TARN_ASSERT(ov[1] > ov[0], "byte-level BPE: empty pre-token match at ", ov[0]);
    encode_word(text.substr(ov[0], ov[1] - ov[0]), out);
    at = ov[1];
  }
  pcre2_match_data_free(md);
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t at = 0;  // start of the text not yet encoded
  size_t from = 0;
  while (from < text.size()) {
    // The leftmost special token, the longest at that place (specials_ is longest first).
    size_t best = std::string_view::npos;
    const Special* hit = nullptr;
    for (const Special& s : specials_) {
      const size_t p = text.find(s.content, from);
      if (p != std::string_view::npos && p < best) {
        best = p;
        hit = &s;
      }
    }
    if (!hit) break;
    size_t begin = best, end = best + hit->content.size(), len = 0;
    if (hit->lstrip) {
      while (begin > at) {
        size_t k = begin - 1;
        while (k > at && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;  // the previous character
        if (!is_space_char(text, k, &len) || k + len != begin) break;
        begin = k;
      }
    }
    if (hit->rstrip)
      while (end < text.size() && is_space_char(text, end, &len)) end += len;
    encode_plain(text.substr(at, begin - at), out);
    out.push_back(hit->id);
    at = from = end;
  }
  encode_plain(text.substr(at), out);
  return out;
}

std::string ByteLevelBpe::decode(const std::vector<int32_t>& ids, const std::vector<int32_t>& skip) const {
  const ByteMap& bm = byte_map();
  std::string out, raw;  // raw: the bytes of the ordinary tokens since the last special
  for (int32_t id : ids) {
    const std::string& tok = id_to_token(id);
    if (std::find(skip.begin(), skip.end(), id) != skip.end()) continue;
    bool special = false;
    for (const Special& s : specials_) special = special || s.id == id;
    if (special) {  // tokenizers decodes the runs between added tokens one by one
      append_utf8_lossy(out, raw);
      raw.clear();
      out += tok;
      continue;
    }
    for (size_t i = 0; i < tok.size();) {
      const size_t n = std::min(utf8_length(static_cast<unsigned char>(tok[i])), tok.size() - i);
      auto it = bm.to_byte.find(tok.substr(i, n));
      TARN_CHECK(it != bm.to_byte.end(), "byte-level BPE: token ", id, " (", tok,
                 ") holds a character that stands for no byte");
      raw += static_cast<char>(it->second);
      i += n;
    }
  }
  append_utf8_lossy(out, raw);
  return out;
}

}  // namespace tarn
