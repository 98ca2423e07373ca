#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <thread>
#include <unordered_map>

#include "data/byte_level_bpe.h"
#include "data/corpus_reader.h"
#include "data/line_reader.h"
#include "framework/io/atomic_file.h"
#include "kernels/check.h"

namespace tarn {
namespace {

// SentencePiece's log levels: 0 info (per-iteration progress), 1 warning, 2 error.
constexpr int kSpLogInfo = 0, kSpLogWarning = 1;
// Pieces every tarn model has before the learned ones: <s> <pad> </s> <unk> <mask>.
constexpr int kReservedPieces = 5;
// Below this many lines a second encoding thread costs more than it saves.
constexpr size_t kLinesPerThread = 4096;

// Feeds in-memory lines to the trainer (SentencePiece's own input= reader would accept lines
// we reject, and splits file names on commas).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

}  // namespace

std::string Tokenizer::train(const std::vector<std::string>& corpus_paths, const std::string& model_prefix,
                             int vocab_size, const TokenizerTrainOptions& options) {
  return train_on_lines(read_text_lines(corpus_paths), model_prefix, vocab_size, options);
}

std::string Tokenizer::train_on_lines(const std::vector<std::string>& lines, const std::string& model_prefix,
                                      int vocab_size, const TokenizerTrainOptions& options) {
  TARN_CHECK(vocab_size > kReservedPieces, "tokenizer: vocab_size ", vocab_size, " must exceed the ",
             kReservedPieces, " special pieces");
  TARN_CHECK(!lines.empty(), "tokenizer: no training lines");
  TARN_CHECK(!model_prefix.empty(), "tokenizer: empty model prefix");
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", model_prefix},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", options.model_type},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(kMaxLineBytes)},  // what the corpus readers let through
      {"hard_vocab_limit", options.hard_vocab_limit ? "true" : "false"},
      {"num_threads", std::to_string(std::max(1, options.num_threads))},
      {"bos_id", std::to_string(kBosId)},
      {"pad_id", std::to_string(kPadId)},
      {"eos_id", std::to_string(kEosId)},
      {"unk_id", std::to_string(kUnkId)},
      {"user_defined_symbols", kMaskPiece},
      {"minloglevel", std::to_string(options.verbose ? kSpLogInfo : kSpLogWarning)},
  };
  sentencepiece::SetRandomGeneratorSeed(options.seed);
  LineIterator it(lines);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it);
  TARN_CHECK(status.ok(), "tokenizer: training ", model_prefix, ".model failed: ", status.ToString());
  return model_prefix + ".model";
}

namespace {

// A HuggingFace tokenizer.json: its first non-blank byte opens a JSON object. A SentencePiece
// model is a protobuf whose first byte is a field tag (0x0A), never '{'.
bool looks_like_json(const std::string& path, std::string* text) {
  *text = read_file(path);
  const size_t first = text->find_first_not_of(" \t\r\n");
  return first != std::string::npos && (*text)[first] == '{';
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& model_path) {
  if (std::string text; looks_like_json(model_path, &text)) {
    auto bpe = std::make_shared<const ByteLevelBpe>(ByteLevelBpe::from_tokenizer_json(text, model_path));
    const struct {
      const char* piece;
      int32_t expected;
    } specials[] = {{"<s>", kBosId}, {"<pad>", kPadId}, {"</s>", kEosId}, {"<unk>", kUnkId}};
    for (const auto& s : specials) {
      const int32_t id = bpe->token_to_id(s.piece);
      TARN_CHECK(id == s.expected, model_path, ": ", s.piece, " has id ", id, ", tarn needs ", s.expected,
                 " (BART's, RoBERTa's and GPT-2-derived BPEs with BART's specials have it)");
    }
    Tokenizer t;
    t.vocab_size_ = bpe->vocab_size();
    t.mask_id_ = bpe->token_to_id(kMaskPiece);
    TARN_CHECK(t.mask_id_ >= 0, model_path, ": no ", kMaskPiece, " token");
    t.path_ = model_path;
    t.bpe_ = std::move(bpe);
    return t;
  }
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(model_path);
  TARN_CHECK(status.ok(), model_path, ": cannot load SentencePiece model: ", status.ToString());
  const struct {
    const char* piece;
    int actual, expected;
  } specials[] = {{"<s>", sp->bos_id(), kBosId},
                  {"<pad>", sp->pad_id(), kPadId},
                  {"</s>", sp->eos_id(), kEosId},
                  {"<unk>", sp->unk_id(), kUnkId}};
  for (const auto& s : specials) {
    TARN_CHECK(s.actual == s.expected, model_path, ": ", s.piece, " has id ", s.actual, ", tarn needs ",
               s.expected, " (train the model with tarn::Tokenizer::train)");
  }
  const int mask = sp->PieceToId(kMaskPiece);
  TARN_CHECK(mask != sp->unk_id() && !sp->IsControl(mask), model_path, ": no ", kMaskPiece,
             " user-defined symbol (train the model with tarn::Tokenizer::train)");
  Tokenizer t;
  t.vocab_size_ = sp->GetPieceSize();
  t.mask_id_ = mask;
  t.path_ = model_path;
  t.sp_ = std::move(sp);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  TARN_CHECK(status.ok(), "tokenizer ", path_, ": encode failed: ", status.ToString());
  return {ids.begin(), ids.end()};
}

Ragged Tokenizer::encode_lines(const std::vector<std::string>& lines, int num_threads) const {
  const size_t threads =
      std::clamp<size_t>(lines.size() / kLinesPerThread, 1, static_cast<size_t>(std::max(1, num_threads)));
  std::vector<Ragged> parts(threads);
  std::vector<std::string> errors(threads);
  auto work = [&](size_t t) {
    const size_t begin = lines.size() * t / threads, end = lines.size() * (t + 1) / threads;
    std::vector<int> ids;
    for (size_t i = begin; i < end; ++i) {
      if (bpe_) {
        try {
          parts[t].push_back(bpe_->encode(lines[i]));
        } catch (const std::exception& e) {
          errors[t] = str_cat("tokenizer ", path_, ": encode failed on line ", i + 1, ": ", e.what());
          return;
        }
        continue;
      }
      const auto status = sp_->Encode(lines[i], &ids);
      if (!status.ok()) {
        errors[t] = str_cat("tokenizer ", path_, ": encode failed on line ", i + 1, ": ", status.ToString());
        return;
      }
      parts[t].push_back(std::vector<int32_t>(ids.begin(), ids.end()));
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (const auto& e : errors) TARN_CHECK(e.empty(), e);
  if (threads == 1) return std::move(parts[0]);
  Ragged out;
  for (const auto& p : parts) out.append(p);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, size_t chunk_tokens) const {
  for (int32_t id : ids)
    TARN_CHECK(id >= 0 && id < vocab_size_, "tokenizer ", path_, ": decode: id ", id, " outside [0, ",
               vocab_size_, ")");
  if (bpe_) return bpe_->decode(ids, {kBosId, kPadId, kEosId});
  // SentencePiece's Decode builds one SentencePieceText entry per id (the piece, its surface,
  // offsets: about 200 bytes each) before it returns the text: decoding 65,536 generated tokens
  // at once held some 13 MB beside a text of a few hundred KB. So the ids are decoded in chunks
  // of about `chunk_tokens`, each cut before a piece that starts a word ("▁...": not control,
  // unknown or byte) once text has been written. Decoded alone, such a chunk loses the leading
  // space its first piece has in the whole text (add_dummy_prefix): that prefix is put back, so
  // the result equals one Decode of all the ids (tests/app/decoding_memory_test.cpp).
  static const std::string kWordStart = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  std::string text;
  auto decode_part = [&](size_t begin, size_t end) {
    std::string part;
    const auto status = sp_->Decode(std::vector<int>(ids.begin() + begin, ids.begin() + end), &part);
    TARN_CHECK(status.ok(), "tokenizer ", path_, ": decode failed: ", status.ToString());
    return part;
  };
  auto starts_word = [&](int32_t id) -> const std::string* {
    if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsByte(id)) return nullptr;
    const std::string& piece = sp_->IdToPiece(id);
    return piece.size() > kWordStart.size() && piece.compare(0, kWordStart.size(), kWordStart) == 0 ? &piece : nullptr;
  };
  size_t begin = 0;
  std::string prefix;  // what the chunk from `begin` lacks in front when decoded alone
  for (size_t i = std::max<size_t>(chunk_tokens, 1); i < ids.size(); ++i) {
    if (i - begin < chunk_tokens) continue;
    const std::string* piece = starts_word(ids[i]);
    if (!piece) continue;
    // Inside the whole text the piece reads with every ▁ as a space; alone, at the start.
    std::string inside;
    for (size_t k = 0; k < piece->size();) {
      if (piece->compare(k, kWordStart.size(), kWordStart) == 0) {
        inside += ' ';
        k += kWordStart.size();
      } else {
        inside += (*piece)[k++];
      }
    }
    const std::string alone = decode_part(i, i + 1);
    if (alone.size() > inside.size() || inside.compare(inside.size() - alone.size(), alone.size(), alone) != 0)
      continue;  // not a model whose start-of-text rule is a dropped prefix: no cut here
    const std::string part = decode_part(begin, i);
    if (text.empty() && part.empty()) continue;  // nothing written yet: the next piece is still at the start
    text += prefix;
    text += part;
    prefix = inside.substr(0, inside.size() - alone.size());
    begin = i;
  }
  if (begin == 0) return decode_part(0, ids.size());
  text += prefix;
  text += decode_part(begin, ids.size());
  return text;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  TARN_CHECK(id >= 0 && id < vocab_size_, "tokenizer ", path_, ": id ", id, " outside [0, ", vocab_size_, ")");
  if (bpe_) return bpe_->id_to_token(id);
  return sp_->IdToPiece(id);
}

}  // namespace tarn
