// End to end with a real (tiny) SentencePiece model: files -> tokenizer -> dataset -> batches.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/batcher.h"
#include "data/denoising_dataset.h"
#include "data/pair_dataset.h"
#include "data/special_ids.h"
#include "test_files.h"
#include "tiny_corpus.h"

namespace tarn {
namespace {

using testing::TempDir;

// The labels of a batch row decoded back to text (</s> and padding dropped).
std::string decode_labels(const Tokenizer& tok, const Batch& b, int64_t row) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < b.tgt_len; ++t) {
    const int32_t id = b.tgt_labels[row * b.tgt_len + t];
    if (id != kIgnoreIndex) ids.push_back(id);
  }
  return tok.decode(ids);
}

TEST(Pipeline, DenoisingBatchesFromATextFileDecodeBackToTheLines) {
  TempDir dir;
  const Tokenizer tok = testing::train_tiny_tokenizer(dir);
  auto lines = testing::tiny_corpus_lines(200, /*seed=*/5);
  std::string bytes;
  for (const auto& l : lines) bytes += l + "\n\n";  // blank lines in between are skipped
  const std::string path = dir.write("train.txt", bytes);

  ReadStats read;
  DenoisingOptions options;
  options.seed = 4;
  const DenoisingDataset data = DenoisingDataset::from_files({path}, tok, options, &read);
  EXPECT_EQ(read.kept, 200);
  EXPECT_EQ(read.empty, 200);
  ASSERT_EQ(data.size(), lines.size());

  BatcherConfig cfg;
  cfg.plan.max_tokens = 256;
  Batcher batcher(data, cfg);
  size_t rows = 0;
  bool saw_mask = false;
  for (size_t i = 0, n = batcher.batches_in_epoch(); i < n; ++i) {
    const Batch b = batcher.next();
    for (int64_t r = 0; r < b.rows; ++r) {
      EXPECT_EQ(decode_labels(tok, b, r), lines[b.example_ids[r]]);
      saw_mask |= std::count(b.src_ids.begin() + r * b.src_len, b.src_ids.begin() + (r + 1) * b.src_len,
                             tok.mask_id()) > 0;
      ++rows;
    }
  }
  EXPECT_EQ(rows, lines.size());
  EXPECT_TRUE(saw_mask);
}

TEST(Pipeline, PairBatchesFromATsvFileKeepSourceAndTargetApart) {
  TempDir dir;
  const Tokenizer tok = testing::train_tiny_tokenizer(dir);
  const std::string path = dir.write("pairs.tsv",
                                     "the cat sat\tthe dog ran\n"
                                     "missing its tab\n"
                                     "a green tree\ta small bird sang in the garden\n");
  ReadStats read;
  PairOptions options;
  options.max_target_length = 4;  // cuts the second target
  const PairDataset data = PairDataset::from_files({path}, tok, options, &read);
  EXPECT_EQ(read.malformed, 1);
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data.stats().truncated_target, 1);
  const Example ex = data.example(0, 0);
  EXPECT_EQ(tok.decode(ex.source), "the cat sat");
  EXPECT_EQ(tok.decode(ex.target), "the dog ran");
  EXPECT_EQ(data.example(1, 0).target.size(), 4u);
}

}  // namespace
}  // namespace tarn
