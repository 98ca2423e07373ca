#include "data/corpus_reader.h"

#include <gtest/gtest.h>

#include "data/line_reader.h"
#include "kernels/check.h"
#include "test_files.h"

namespace tarn {
namespace {

using testing::TempDir;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Runs `f`, which must throw tarn::Error, and returns the message.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected tarn::Error";
  return "";
}

TEST(TextCorpus, ReadsEveryNonBlankLineInOrderAcrossFiles) {
  TempDir dir;
  const auto a = dir.write("a.txt", "first line\n\n   \nsecond line\r\nthird");  // CRLF, no final newline
  const auto b = dir.write("b.txt", "fourth\n");
  ReadStats stats;
  const auto lines = read_text_lines({a, b}, &stats);
  EXPECT_EQ(lines, (std::vector<std::string>{"first line", "second line", "third", "fourth"}));
  EXPECT_EQ(stats.lines, 6);
  EXPECT_EQ(stats.kept, 4);
  EXPECT_EQ(stats.empty, 2);
  EXPECT_TRUE(stats.warnings.empty());
}

TEST(TextCorpus, ALineOverTheBoundIsSkippedWithAWarningNamingIt) {
  TempDir dir;
  const auto a = dir.write("a.txt", "short\n" + std::string(kMaxLineBytes + 1, 'x') + "\n" +
                                        std::string(kMaxLineBytes, 'y') + "\nend\n");
  ReadStats stats;
  const auto lines = read_text_lines({a}, &stats);
  ASSERT_EQ(lines.size(), 3u) << "a line of exactly the bound is kept";
  EXPECT_EQ(lines[1].size(), kMaxLineBytes);
  EXPECT_EQ(stats.malformed, 1);
  ASSERT_EQ(stats.warnings.size(), 1u);
  EXPECT_TRUE(contains(stats.warnings[0], a + ":2: skipped: the line is 65537 bytes, over the 65536")) << stats.warnings[0];
}

TEST(TextCorpus, MissingFileIsAnErrorNamingIt) {
  TempDir dir;
  const auto ok = dir.write("ok.txt", "fine\n");
  const auto missing = dir.file("missing.txt");
  const std::string msg = error_of([&] { read_text_lines({ok, missing}); });
  EXPECT_TRUE(contains(msg, missing)) << msg;
  EXPECT_TRUE(contains(msg, "not found")) << msg;
}

TEST(TextCorpus, EmptyFileIsAnErrorNamingIt) {
  TempDir dir;
  const auto empty = dir.write("empty.txt", "");
  const std::string msg = error_of([&] { read_text_lines({empty}); });
  EXPECT_TRUE(contains(msg, empty)) << msg;
  EXPECT_TRUE(contains(msg, "empty")) << msg;
}

TEST(TextCorpus, FileOfBlankLinesIsAnErrorNamingIt) {
  TempDir dir;
  const auto blank = dir.write("blank.txt", "\n  \n\t\n");
  const std::string msg = error_of([&] { read_text_lines({blank}); });
  EXPECT_TRUE(contains(msg, blank)) << msg;
  EXPECT_TRUE(contains(msg, "no usable lines")) << msg;
}

TEST(TextCorpus, FolderInsteadOfFileIsAnError) {
  TempDir dir;
  EXPECT_THROW(read_text_lines({dir.path().string()}), Error);
}

TEST(TextCorpus, NoFilesIsAnError) { EXPECT_THROW(read_text_lines({}), Error); }

TEST(TextCorpus, InvalidUtf8LinesAreSkippedCountedAndWarnedWithLineNumbers) {
  TempDir dir;
  const auto path = dir.write("mixed.txt", "good one\nbad \xFF byte\ngood two\n\xC0\xAF overlong\ngood three\n");
  ReadStats stats;
  const auto lines = read_text_lines({path}, &stats);
  EXPECT_EQ(lines, (std::vector<std::string>{"good one", "good two", "good three"}));
  EXPECT_EQ(stats.invalid_utf8, 2);
  ASSERT_EQ(stats.warnings.size(), 2u);
  EXPECT_TRUE(contains(stats.warnings[0], path + ":2:")) << stats.warnings[0];
  EXPECT_TRUE(contains(stats.warnings[1], path + ":4:")) << stats.warnings[1];
  EXPECT_TRUE(contains(stats.summary(), "2 invalid UTF-8")) << stats.summary();
}

TEST(TextCorpus, WarningsStopAtTheCapButCountsDoNot) {
  TempDir dir;
  std::string bytes = "one good line\n";
  for (int i = 0; i < 50; ++i) bytes += "bad\xFE\n";
  ReadStats stats;
  read_text_lines({dir.write("many.txt", bytes)}, &stats);
  EXPECT_EQ(stats.invalid_utf8, 50);
  EXPECT_EQ(stats.warnings.size(), kMaxReadWarnings);
}

TEST(TsvCorpus, SplitsEachLineAtTheTab) {
  TempDir dir;
  const auto path = dir.write("pairs.tsv", "hello world\tbonjour le monde\r\nsource two\ttarget two\n");
  const auto pairs = read_tsv_pairs({path});
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].source, "hello world");
  EXPECT_EQ(pairs[0].target, "bonjour le monde");
  EXPECT_EQ(pairs[1].source, "source two");
  EXPECT_EQ(pairs[1].target, "target two");
}

TEST(TsvCorpus, LinesWithoutExactlyOneTabOrWithAnEmptySideAreCountedSkips) {
  TempDir dir;
  const auto path = dir.write("pairs.tsv",
                              "good\tpair\n"
                              "no tab here\n"
                              "two\ttabs\there\n"
                              "\tempty source\n"
                              "empty target\t  \n"
                              "another\tgood one\n"
                              "bad \xFF utf8\tx\n");
  ReadStats stats;
  const auto pairs = read_tsv_pairs({path}, &stats);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1].source, "another");
  EXPECT_EQ(stats.malformed, 4);
  EXPECT_EQ(stats.invalid_utf8, 1);
  EXPECT_EQ(stats.kept, 2);
  ASSERT_EQ(stats.warnings.size(), 5u);
  EXPECT_TRUE(contains(stats.warnings[0], path + ":2: skipped: no tab")) << stats.warnings[0];
  EXPECT_TRUE(contains(stats.warnings[1], path + ":3:")) << stats.warnings[1];
}

TEST(TsvCorpus, FileWithNoValidPairIsAnErrorNamingIt) {
  TempDir dir;
  const auto path = dir.write("bad.tsv", "no tab\nstill no tab\n");
  const std::string msg = error_of([&] { read_tsv_pairs({path}); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "2 malformed")) << msg;
}

}  // namespace
}  // namespace tarn
