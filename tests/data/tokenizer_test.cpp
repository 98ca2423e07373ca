#include "data/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <algorithm>

#include "data/special_ids.h"
#include "kernels/check.h"
#include "test_files.h"
#include "tiny_corpus.h"

namespace tarn {
namespace {

using testing::TempDir;

// One model for the suite (ctest runs each test in its own process, so it trains once there).
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    tok_ = new Tokenizer(testing::train_tiny_tokenizer(*dir_));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete dir_;
  }
  static TempDir* dir_;
  static Tokenizer* tok_;
};
TempDir* TokenizerTest::dir_ = nullptr;
Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, SpecialIdsSitWhereDesignSays) {
  EXPECT_EQ(tok_->bos_id(), 0);
  EXPECT_EQ(tok_->pad_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->unk_id(), 3);
  EXPECT_EQ(tok_->id_to_piece(0), "<s>");
  EXPECT_EQ(tok_->id_to_piece(1), "<pad>");
  EXPECT_EQ(tok_->id_to_piece(2), "</s>");
  EXPECT_EQ(tok_->id_to_piece(3), "<unk>");
  EXPECT_EQ(tok_->id_to_piece(tok_->mask_id()), kMaskPiece);
  EXPECT_GT(tok_->mask_id(), kUnkId);
  EXPECT_LT(tok_->mask_id(), tok_->vocab_size());
  EXPECT_LE(tok_->vocab_size(), testing::kTinyVocab);
}

TEST_F(TokenizerTest, DecodeOfEncodeGivesBackTheText) {
  for (const auto& line : testing::tiny_corpus_lines(50, /*seed=*/99)) {
    const auto ids = tok_->encode(line);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(tok_->decode(ids), line);
  }
}

TEST_F(TokenizerTest, EncodingPlainTextProducesNoSpecialIds) {
  for (int32_t id : tok_->encode("the small cat sat on the green mat")) {
    EXPECT_GT(id, kUnkId);
    EXPECT_NE(id, tok_->mask_id());
  }
}

TEST_F(TokenizerTest, UnseenCharactersBecomeUnk) {
  const auto ids = tok_->encode("the \xE2\x98\x83 cat");  // a snowman, never in the corpus
  EXPECT_NE(std::find(ids.begin(), ids.end(), kUnkId), ids.end());
}

TEST_F(TokenizerTest, MaskPieceInTextEncodesToMaskId) {
  const auto ids = tok_->encode("the <mask> sat");
  EXPECT_NE(std::find(ids.begin(), ids.end(), tok_->mask_id()), ids.end());
}

TEST_F(TokenizerTest, DecodeDropsControlIds) {
  const auto ids = tok_->encode("the cat");
  std::vector<int32_t> framed = {kBosId};
  framed.insert(framed.end(), ids.begin(), ids.end());
  framed.insert(framed.end(), {kEosId, kPadId, kPadId});
  EXPECT_EQ(tok_->decode(framed), "the cat");
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  EXPECT_THROW(tok_->decode({5, tok_->vocab_size()}), Error);
  EXPECT_THROW(tok_->decode({-100}), Error);
}

TEST_F(TokenizerTest, EncodeLinesOnTwoThreadsMatchesEncodeInOrder) {
  const auto lines = testing::tiny_corpus_lines(10000, /*seed=*/3);  // enough for two threads
  const Ragged all = tok_->encode_lines(lines, 2);
  ASSERT_EQ(all.rows(), lines.size());
  for (size_t i = 0; i < lines.size(); i += 997) EXPECT_EQ(all.row(i).to_vector(), tok_->encode(lines[i])) << i;
  EXPECT_EQ(all.row(lines.size() - 1).to_vector(), tok_->encode(lines.back()));
}

TEST_F(TokenizerTest, CopiesShareTheModelAndStayUsable) {
  Tokenizer copy = *tok_;
  EXPECT_EQ(copy.encode("the dog ran"), tok_->encode("the dog ran"));
  EXPECT_EQ(copy.path(), tok_->path());
}

TEST(TokenizerTrain, IsQuietOnStderrByDefault) {
  TempDir dir;
  const std::string corpus = dir.write_lines("c.txt", testing::tiny_corpus_lines(200));
  TokenizerTrainOptions options;
  options.hard_vocab_limit = false;
  ::testing::internal::CaptureStderr();
  Tokenizer::train({corpus}, dir.file("m"), 60, options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
}

TEST(TokenizerTrain, MissingCorpusIsAnErrorNamingTheFile) {
  TempDir dir;
  const std::string missing = dir.file("no_such_corpus.txt");
  try {
    Tokenizer::train({missing}, dir.file("m"), 60);
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST(TokenizerTrain, TooSmallVocabularyIsAnError) { EXPECT_THROW(Tokenizer::train_on_lines({"a b"}, "x", 5), Error); }

TEST(TokenizerLoad, MissingModelIsAnErrorNamingTheFile) {
  try {
    Tokenizer::load("/nonexistent/tiny.model");
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tiny.model"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, ModelWithSentencePieceDefaultIdsIsRejected) {
  // SentencePiece's defaults put <unk> at 0, <s> at 1, </s> at 2 and no <pad>: not tarn's.
  TempDir dir;
  const std::string corpus = dir.write_lines("c.txt", testing::tiny_corpus_lines(200));
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      {{"input", corpus}, {"model_prefix", dir.file("foreign")}, {"vocab_size", "60"},
       {"hard_vocab_limit", "false"}, {"minloglevel", "2"}});
  ASSERT_TRUE(status.ok()) << status.ToString();
  try {
    Tokenizer::load(dir.file("foreign.model"));
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("foreign.model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tarn needs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tarn
