// The word error rate `tarn denoise` reports.
#include "app/word_errors.h"

#include <gtest/gtest.h>

#include "framework/log/log.h"

namespace tarn::app {
namespace {

TEST(WordErrors, EditDistanceCountsWordSubstitutionsInsertionsAndDeletions) {
  EXPECT_EQ(word_edit_distance("the cat sat", "the cat sat"), 0);
  EXPECT_EQ(word_edit_distance("  the   cat sat ", "the cat sat"), 0);  // whitespace only separates
  EXPECT_EQ(word_edit_distance("the dog sat", "the cat sat"), 1);       // substitution
  EXPECT_EQ(word_edit_distance("the cat", "the cat sat"), 1);           // deletion
  EXPECT_EQ(word_edit_distance("the fat cat sat", "the cat sat"), 1);   // insertion
  EXPECT_EQ(word_edit_distance("sat cat the", "the cat sat"), 2);
  EXPECT_EQ(word_edit_distance("", "the cat sat"), 3);
  EXPECT_EQ(word_edit_distance("a b c d", ""), 4);
  EXPECT_EQ(word_edit_distance("cats", "cat"), 1);  // words, not characters
  // Dropping the first word and adding one at the end costs two, not a substitution per word.
  EXPECT_EQ(word_edit_distance("b c d e", "a b c d"), 2);
}

TEST(WordErrors, RateIsEditsOverReferenceWordsSummedOverLines) {
  WordErrors e;
  EXPECT_EQ(e.rate(), 0.0);
  e.add("the dog sat", "the cat sat");
  e.add("a b", "a b c d e");
  EXPECT_EQ(e.edits, 4);
  EXPECT_EQ(e.reference_words, 8);
  EXPECT_DOUBLE_EQ(e.rate(), 0.5);
}

TEST(LogNumber, FormatsOneDoubleWithAPrintfConversion) {
  EXPECT_EQ(log::number("%.3f", 0.58172), "0.582");
  EXPECT_EQ(log::number("%.2e", 1234.5), "1.23e+03");
  EXPECT_EQ(log::number("%.0f", 709.6), "710");
}

}  // namespace
}  // namespace tarn::app
