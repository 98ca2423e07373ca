#pragma once
// GPT-2's byte-level BPE, as BART, RoBERTa and GPT-2 use it through HuggingFace's `tokenizers`
// (docs/design.md section 3, "Byte-level BPE"). Encoding: special tokens are cut out of the text
// first; each remaining piece is split by GPT-2's pre-tokenisation regex (PCRE2, Unicode
// properties); each word's bytes are written as printable characters (bytes_to_unicode) and
// merged pair by pair, lowest merge rank first; the merged symbols are looked up in the vocabulary.
// Decoding maps the symbols' characters back to bytes. Lossless on any UTF-8; bytes that are not
// (a model may generate any token sequence) decode to U+FFFD as HuggingFace's do.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tarn {

class ByteLevelBpe {
 public:
  struct Special {
    std::string content;
    int32_t id = 0;
    bool lstrip = false;  // also swallows the whitespace before it (RoBERTa/BART's <mask>)
    bool rstrip = false;
  };

  // From GPT-2's two files (vocab.json: {"token": id}, merges.txt: "a b" per line, a
  // "#version" first line allowed); `specials` are matched in the text before BPE.
  static ByteLevelBpe from_files(const std::string& vocab_json_path, const std::string& merges_path,
                                 std::vector<Special> specials);
  // From HuggingFace's tokenizer.json: refused (naming the field) unless its model is BPE with a
  // ByteLevel pre-tokenizer and decoder and nothing tarn does not do (normalizer, dropout,
  // subword prefixes, byte fallback, prefix space).
  static ByteLevelBpe from_tokenizer_json(std::string_view text, const std::string& source);
  // tokenizer.json as tokenizers writes it for BART (RobertaProcessing post-processor), which
  // from_tokenizer_json and transformers' PreTrainedTokenizerFast both read.
  std::string to_tokenizer_json() const;
  // vocab.json and merges.txt, GPT-2's files.
  std::string vocab_json() const;
  std::string merges_txt() const;

  std::vector<int32_t> encode(std::string_view text) const;  // no <s> or </s> added
  // Specials in `skip` decode to nothing; any other id to its bytes, read as UTF-8 with each
  // ill-formed part as U+FFFD (as tokenizers' ByteLevel decoder: text, never broken UTF-8).
  // Throws on an unknown id.
  std::string decode(const std::vector<int32_t>& ids, const std::vector<int32_t>& skip) const;

  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // -1 when absent.
  int32_t token_to_id(const std::string& token) const;
  const std::string& id_to_token(int32_t id) const;  // the symbol as written in vocab.json
  const std::vector<Special>& specials() const { return specials_; }

 private:
  struct Regex;
  void build(std::unordered_map<std::string, int32_t> vocab, std::vector<std::pair<std::string, std::string>> merges,
             std::vector<Special> specials, const std::string& source);
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<std::pair<std::string, std::string>> merges_;          // in rank order
  std::unordered_map<std::string, int32_t> merge_rank_;              // "a b" -> rank
  std::vector<Special> specials_;
  std::shared_ptr<const Regex> regex_;
};

}  // namespace tarn
