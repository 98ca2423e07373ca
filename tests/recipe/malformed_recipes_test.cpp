// Every file of tests/recipe/malformed/ is a recipe with one mistake. Its header says what the
// first error must be and, optionally, which overrides to apply:
//   # expect: 5: optimizer.lr: expected a positive number, got "fast"
//   # set: training.max_steps=100
// "N: message" means "<file>:N: message" (N = 0: the file without a line number); an
// expectation starting with "--set" is matched as written. The first issue must be exactly the
// expected text (line number and whole message).
#include <gtest/gtest.h>

#include <cctype>
#include <sstream>

#include "app/recipe/recipe.h"
#include "tests/config/config_test_util.h"

namespace tarn {
namespace {

using testing::config_issues;
using testing::read_text;
using testing::yaml_files;

constexpr size_t kMinMalformedRecipes = 30;

struct Case {
  std::string path;
  std::string expect;  // the full expected prefix of the first issue
  std::vector<std::string> overrides;
};

Case read_case(const std::string& path) {
  Case c{path, "", {}};
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line) && line.rfind("#", 0) == 0) {
    if (line.rfind("# set: ", 0) == 0) c.overrides.push_back(line.substr(7));
    if (line.rfind("# expect: ", 0) != 0) continue;
    const std::string e = line.substr(10);
    if (e.rfind("--set", 0) == 0) {
      c.expect = e;
      continue;
    }
    const size_t colon = e.find(": ");
    const int n = std::stoi(e.substr(0, colon));
    c.expect = (n > 0 ? path + ":" + std::to_string(n) : path) + ": " + e.substr(colon + 2);
  }
  return c;
}

TEST(MalformedRecipes, CorpusHasAtLeastThirtyCasesEachWithAnExpectation) {
  const auto files = yaml_files("tests/recipe/malformed");
  EXPECT_GE(files.size(), kMinMalformedRecipes);
  for (const std::string& f : files) EXPECT_FALSE(read_case(f).expect.empty()) << f << " has no '# expect: ' line";
}

// One test per file, so that one failure hides no other; the whole first message must be the
// expected one (a message that grows or loses its hint fails).
class MalformedRecipe : public ::testing::TestWithParam<std::string> {};

TEST_P(MalformedRecipe, IsRejectedWithTheExpectedMessageAndLine) {
  const Case c = read_case(GetParam());
  const auto issues = config_issues([&] { load_recipe(c.path, c.overrides); });
  ASSERT_FALSE(issues.empty()) << "accepted";
  EXPECT_EQ(issues.front().str(), c.expect) << "all issues:\n" << ConfigError(issues).what();
}

INSTANTIATE_TEST_SUITE_P(Files, MalformedRecipe, ::testing::ValuesIn(yaml_files("tests/recipe/malformed")),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(info.param.find_last_of('/') + 1);
                           name = name.substr(0, name.find('.'));
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace tarn
