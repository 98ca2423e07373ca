#pragma once
// The tokenizer: SentencePiece (tarn's own recipes), used through its library, or GPT-2/BART's
// byte-level BPE (data/byte_level_bpe.h) for imported HuggingFace models. load() tells them
// apart by the file: a HuggingFace tokenizer.json is a JSON object, a SentencePiece model a
// protobuf; a checkpoint's tokenizer.model is either, so it records which one its ids are.
// SentencePiece: Models are trained with the special
// ids of docs/design.md section 3 at fixed positions (<s>=0, <pad>=1, </s>=2, <unk>=3, see
// data/special_ids.h) and with <mask> as a user-defined symbol; SentencePiece places
// user-defined symbols right after the specials, so mask_id() is 4 for models trained here.
// load() refuses models whose special ids differ, so the rest of tarn can rely on them.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/ragged.h"
#include "data/special_ids.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tarn {

class ByteLevelBpe;

constexpr const char* kMaskPiece = "<mask>";

struct TokenizerTrainOptions {
  std::string model_type = "unigram";  // SentencePiece's: unigram, bpe, char or word
  double character_coverage = 1.0;     // 1.0 keeps every character (right for English text)
  int64_t input_sentence_size = 0;     // train on a sample of this many lines; 0 = all lines
  bool hard_vocab_limit = true;        // false: vocab_size is an upper bound (tiny corpora)
  int num_threads = 2;
  uint32_t seed = 0;     // SentencePiece's sampling seed (only used when sampling lines)
  bool verbose = false;  // SentencePiece logs every EM step to stderr; off unless asked
};

class Tokenizer {
 public:
  // Trains on every usable line of the plain-text corpus files (read with the rules of
  // data/corpus_reader.h) and writes <model_prefix>.model and .vocab. Returns the .model path.
  static std::string train(const std::vector<std::string>& corpus_paths, const std::string& model_prefix,
                           int vocab_size, const TokenizerTrainOptions& options = {});
  // The same from lines already in memory (e.g. both sides of a TSV corpus).
  static std::string train_on_lines(const std::vector<std::string>& lines, const std::string& model_prefix,
                                    int vocab_size, const TokenizerTrainOptions& options = {});

  // Loads a SentencePiece .model or a byte-level BPE tokenizer.json (HuggingFace's format);
  // throws tarn::Error naming it when it is unreadable, not one of the two, or its special ids
  // (<s> <pad> </s> <unk>) are not tarn's.
  static Tokenizer load(const std::string& model_path);

  enum class Kind { sentencepiece, byte_level_bpe };
  Kind kind() const { return bpe_ ? Kind::byte_level_bpe : Kind::sentencepiece; }
  const char* kind_name() const { return bpe_ ? "byte-level BPE" : "SentencePiece"; }
  const ByteLevelBpe* bpe() const { return bpe_.get(); }  // null for SentencePiece

  std::vector<int32_t> encode(std::string_view text) const;  // no <s> or </s> added
  // Encodes many lines on `num_threads` threads; row i holds line i's ids.
  Ragged encode_lines(const std::vector<std::string>& lines, int num_threads = 2) const;
  // Control ids (<s>, <pad>, </s>) decode to nothing; ids out of range are an error. Long
  // sequences are decoded by chunks of about `chunk_tokens` ids, so that what SentencePiece
  // builds per id is bounded; the text is the same whatever the chunk (given for tests).
  static constexpr size_t kDecodeChunkTokens = 1024;
  std::string decode(const std::vector<int32_t>& ids, size_t chunk_tokens = kDecodeChunkTokens) const;
  std::string id_to_piece(int32_t id) const;

  int32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return kBosId; }
  int32_t pad_id() const { return kPadId; }
  int32_t eos_id() const { return kEosId; }
  int32_t unk_id() const { return kUnkId; }
  int32_t mask_id() const { return mask_id_; }
  const std::string& path() const { return path_; }

 private:
  Tokenizer() = default;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;  // immutable: cheap copies
  std::shared_ptr<const ByteLevelBpe> bpe_;                         // or this one
  std::string path_;
  int32_t vocab_size_ = 0;
  int32_t mask_id_ = -1;
};

}  // namespace tarn
