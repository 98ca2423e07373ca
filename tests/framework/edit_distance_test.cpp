// framework/edit_distance.h: one edit distance for recipe keys' "did you mean" (characters,
// adjacent swaps count once) and word error rates (words, Levenshtein).
#include "framework/edit_distance.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace tarn {
namespace {

using std::string_view;
using Words = std::vector<std::string>;

TEST(EditDistance, CountsTranspositionsOnceWhenAsked) {
  EXPECT_EQ(edit_distance(string_view("lr"), string_view("lr"), true), 0);
  EXPECT_EQ(edit_distance(string_view("rl"), string_view("lr"), true), 1);
  EXPECT_EQ(edit_distance(string_view("max_step"), string_view("max_steps"), true), 1);
  EXPECT_EQ(edit_distance(string_view(""), string_view("abc"), true), 3);
  EXPECT_EQ(edit_distance(string_view("rl"), string_view("lr")), 2);  // Levenshtein: two substitutions
  EXPECT_EQ(edit_distance(string_view("abc"), string_view("ca"), true), 3);  // no part edited twice
  EXPECT_EQ(edit_distance(string_view("kitten"), string_view("sitting")), 3);
}

TEST(EditDistance, WordsAreItems) {
  EXPECT_EQ(edit_distance(Words{"the", "cat", "sat"}, Words{"the", "cat", "sat"}), 0);
  EXPECT_EQ(edit_distance(Words{"sat", "cat", "the"}, Words{"the", "cat", "sat"}), 2);
  EXPECT_EQ(edit_distance(Words{"cat", "the"}, Words{"the", "cat"}), 2);
  EXPECT_EQ(edit_distance(Words{"cat", "the"}, Words{"the", "cat"}, true), 1);
  EXPECT_EQ(edit_distance(Words{}, Words{"a", "b"}), 2);
  EXPECT_EQ(edit_distance(Words{"a", "b", "c", "d"}, Words{}), 4);
}

}  // namespace
}  // namespace tarn
