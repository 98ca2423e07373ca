#include "data/wordnet_corpus.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kernels/check.h"
#include "test_files.h"

namespace tarn {
namespace {

using testing::TempDir;
using Lines = std::vector<std::string>;

TEST(SplitGloss, SeparatesTheDefinitionFromEachQuotedExample) {
  EXPECT_EQ(split_gloss("close interaction; \"they kept in daily contact\"; \"they claimed that they had been in "
                        "contact with extraterrestrial beings\"  "),
            (Lines{"close interaction", "they kept in daily contact",
                   "they claimed that they had been in contact with extraterrestrial beings"}));
  EXPECT_EQ(split_gloss("reciprocal action and reaction  "), (Lines{"reciprocal action and reaction"}));
}

TEST(SplitGloss, KeepsMultiPartDefinitionsTogether) {
  EXPECT_EQ(split_gloss("a mutual or reciprocal action; interacting"),
            (Lines{"a mutual or reciprocal action; interacting"}));
}

TEST(SplitGloss, SemicolonsInsideQuotesDoNotSplitAndAttributionsAreDropped) {
  EXPECT_EQ(split_gloss("duty; \"every right implies a responsibility; every opportunity, an obligation\"- "
                        "John D.Rockefeller Jr"),
            (Lines{"duty", "every right implies a responsibility; every opportunity, an obligation"}));
}

TEST(SplitGloss, ExamplesAfterAColonOrCommaAreExamples) {
  EXPECT_EQ(split_gloss("restrict or confine, \"I limit you to two visits to the pub a day\""),
            (Lines{"restrict or confine", "I limit you to two visits to the pub a day"}));
  EXPECT_EQ(split_gloss("to be a menacing indication of something:\"The clouds threaten rain\""),
            (Lines{"to be a menacing indication of something", "The clouds threaten rain"}));
  EXPECT_EQ(split_gloss("a complete extent or range: \"a face that expressed a gamut of emotions\"; \"the gamut\""),
            (Lines{"a complete extent or range", "a face that expressed a gamut of emotions", "the gamut"}));
}

TEST(SplitGloss, QuotedPhrasesInsideADefinitionStayInIt) {
  EXPECT_EQ(split_gloss("significant progress (especially in the phrase \"make strides\"); \"they made big strides\""),
            (Lines{"significant progress (especially in the phrase \"make strides\")", "they made big strides"}));
}

TEST(SplitGloss, UnbalancedQuotesLeaveNoStrayQuoteCharacters) {
  EXPECT_EQ(split_gloss("utter with seeming casualness; \"drop a hint\"; drop names\""),
            (Lines{"utter with seeming casualness", "drop a hint", "drop names"}));
  EXPECT_EQ(split_gloss("a local branch where postal services are available\""),
            (Lines{"a local branch where postal services are available"}));
  EXPECT_EQ(split_gloss("promise of reward as in \"carrot and stick\"; \"used the carrot\";"),
            (Lines{"promise of reward as in \"carrot and stick\"", "used the carrot"}));
}

TEST(SplitOf, IsAFixedHashOfTheLine) {
  // FNV-1a 64 modulo 100: 0 -> test, 1 -> valid, 2..99 -> train (values computed offline).
  EXPECT_EQ(split_of("line 25"), Split::kTest);
  EXPECT_EQ(split_of("line 118"), Split::kValid);
  EXPECT_EQ(split_of("the cat sat"), Split::kTrain);
  int valid = 0, test = 0;
  constexpr int kLines = 20000;
  for (int i = 0; i < kLines; ++i) {
    const Split s = split_of("synthetic line " + std::to_string(i));
    valid += s == Split::kValid;
    test += s == Split::kTest;
  }
  EXPECT_NEAR(valid, kLines / 100, 50);
  EXPECT_NEAR(test, kLines / 100, 50);
}

// A miniature WordNet: license header lines, glosses with repeated examples.
void write_fake_wordnet(const TempDir& dir) {
  const std::string header =
      "  1 This software and database is being provided to you, the LICENSEE, by  \n"
      "  2 Princeton University under the following license.  \n";
  dir.write("data.noun", header +
                             "00001740 03 n 01 entity 0 000 | that which is perceived or known; \"an entity\"  \n"
                             "00039211 04 n 01 interplay 0 000 | reciprocal action and reaction  \n");
  dir.write("data.verb", header + "01 29 v 01 breathe 0 000 | draw air into the lungs; \"an entity\"  \n");
  dir.write("data.adj", header + "02 00 s 01 able 0 000 | having the means; \"she was able to program\"  \n");
  dir.write("data.adv", header + "03 02 r 01 very 0 000 | being the same one; \"line 25\"; \"line 118\"\n");
}

TEST(PrepareWordNet, WritesDeduplicatedHashSplitsWithoutLicenseText) {
  TempDir wn, out;
  write_fake_wordnet(wn);
  const PreparedCorpus corpus = prepare_wordnet_corpus(out.path().string(), wn.path().string());
  EXPECT_EQ(corpus.glosses, 5);
  EXPECT_EQ(corpus.duplicates, 1);  // "an entity" appears twice

  const Lines train = testing::read_lines(corpus.train.path), valid = testing::read_lines(corpus.valid.path),
              test = testing::read_lines(corpus.test.path);
  EXPECT_EQ(valid, (Lines{"line 118"}));
  EXPECT_EQ(test, (Lines{"line 25"}));
  EXPECT_EQ(train, (Lines{"that which is perceived or known", "an entity", "reciprocal action and reaction",
                          "draw air into the lungs", "having the means", "she was able to program",
                          "being the same one"}));
  EXPECT_EQ(corpus.train.lines, 7);
  EXPECT_NEAR(corpus.valid.mean_chars, 8.0, 1e-9);
  EXPECT_NEAR(corpus.valid.mean_words, 2.0, 1e-9);
  for (const auto& line : train) EXPECT_EQ(split_of(line), Split::kTrain) << line;
}

TEST(PrepareWordNet, RunningTwiceGivesIdenticalFiles) {
  TempDir wn, out1, out2;
  write_fake_wordnet(wn);
  const auto a = prepare_wordnet_corpus(out1.path().string(), wn.path().string());
  const auto b = prepare_wordnet_corpus(out2.path().string(), wn.path().string());
  EXPECT_EQ(testing::read_lines(a.train.path), testing::read_lines(b.train.path));
  EXPECT_EQ(testing::read_lines(a.valid.path), testing::read_lines(b.valid.path));
}

TEST(PrepareWordNet, MissingDataFileIsAnErrorNamingIt) {
  TempDir wn, out;
  write_fake_wordnet(wn);
  std::filesystem::remove(wn.file("data.adj"));
  try {
    prepare_wordnet_corpus(out.path().string(), wn.path().string());
    FAIL() << "expected tarn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(wn.file("data.adj")), std::string::npos) << e.what();
  }
}

TEST(PrepareWordNet, InstalledWordNetGivesOver150kUniqueCleanLines) {
  if (!std::filesystem::exists(std::string(kWordNetDir) + "/data.noun")) GTEST_SKIP() << "wordnet-base not installed";
  const WordNetText text = read_wordnet();
  EXPECT_EQ(text.glosses, 117659);  // WordNet 3.0 synsets
  EXPECT_GT(text.lines.size(), 150000u);
  const std::set<std::string> unique(text.lines.begin(), text.lines.end());
  EXPECT_EQ(unique.size(), text.lines.size());
  for (const auto& line : text.lines) {
    ASSERT_FALSE(line.empty());
    ASSERT_NE(line.front(), ' ') << line;
    ASSERT_EQ(line.find("Princeton University under the following license"), std::string::npos);
  }
}

}  // namespace
}  // namespace tarn
