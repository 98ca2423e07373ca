// The generic schema engine on a toy struct: nothing here knows about recipes.
#include "framework/config/schema.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstring>
#include <random>

#include "config_test_util.h"
#include "framework/config/yaml_scalar.h"

namespace tarn::config {
namespace {

using testing::config_issues;

struct Inner {
  int64_t count = 3;
  std::string mode = "fast";
};
struct Toy {
  double rate = 0.5;
  bool on = true;
  std::string name;
  std::array<double, 3> weights{1, 2, 3};
  Inner inner;
};

const Schema& toy_schema() {
  static const Schema schema = [] {
    Schema s("toy");
    auto root = s.root<Toy>();
    root.number(&Toy::rate, "rate", "a rate").above(0).max(1);
    root.boolean(&Toy::on, "on", "a switch");
    root.string(&Toy::name, "name", "a name").required();
    root.numbers(&Toy::weights, "weights", "three weights").non_negative();
    auto inner = root.section(&Toy::inner, "inner", "a nested section");
    inner.integer(&Inner::count, "count", "how many").min(1).max(10);
    inner.choice(&Inner::mode, "mode", "how", {"fast", "slow"});
    inner.fixed("sealed", "always sealed", "true", "toys are sealed");
    return s;
  }();
  return schema;
}

Toy load(const std::string& text, const std::vector<std::string>& overrides = {}) {
  Toy t;
  Loader loader(toy_schema(), &t);
  loader.apply_text(text, "toy.yaml");
  for (const std::string& o : overrides) loader.apply_override(o);
  loader.check_required();
  loader.throw_if_errors();
  return t;
}

std::string first_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  const auto issues = config_issues([&] { load(text, overrides); });
  return issues.empty() ? "" : issues.front().str();
}

TEST(SchemaEngine, FillsEveryTypeAndKeepsDefaults) {
  const Toy t = load("name: bob\nweights: [0, 0.5, 7]\ninner:\n  mode: slow\n  sealed: true\n");
  EXPECT_EQ(t.name, "bob");
  EXPECT_EQ(t.weights[2], 7.0);
  EXPECT_EQ(t.inner.mode, "slow");
  EXPECT_EQ(t.inner.count, 3);  // default kept
  EXPECT_EQ(t.rate, 0.5);
}

TEST(SchemaEngine, RangesAreInclusiveOrExclusiveAsDeclared) {
  EXPECT_EQ(load("name: a\nrate: 1\n").rate, 1.0);
  EXPECT_EQ(first_error("name: a\nrate: 0\n"), "toy.yaml:2: rate: expected a number in (0, 1], got 0");
  EXPECT_EQ(first_error("name: a\ninner: {count: 11}\n"), "toy.yaml:2: inner.count: expected an integer in [1, 10], got 11");
}

TEST(SchemaEngine, CheckValuesHoldsABuiltObjectToTheRangesTheLoaderApplies) {
  std::vector<std::string> issues;
  auto collect = [&](const std::string& path, const std::string& message) { issues.push_back(path + ": " + message); };
  Toy t;
  t.name = "a";
  toy_schema().check_values(t, collect);
  EXPECT_TRUE(issues.empty()) << issues.front();  // the defaults and a name: in range
  t.rate = 0;
  t.weights[1] = -1;
  t.inner.count = 11;
  t.inner.mode = "medium";
  t.name.clear();
  toy_schema().check_values(t, collect);
  // In schema order, worded as the loader's messages, each value as to_yaml writes it (a fixed
  // key holds no value to check).
  const std::vector<std::string> expected = {
      "rate: expected a number in (0, 1], got 0.0",
      "name: expected a non-empty string, got \"\"",
      "weights: expected a list of 3 numbers, each >= 0, got [1.0, -1.0, 3.0]",
      "inner.count: expected an integer in [1, 10], got 11",
      "inner.mode: expected one of fast, slow, got medium"};
  EXPECT_EQ(issues, expected);
}

TEST(SchemaEngine, FixedKeyAcceptsOnlyItsValue) {
  EXPECT_EQ(first_error("name: a\ninner:\n  sealed: false\n"),
            "toy.yaml:3: inner.sealed: expected true (toys are sealed), got false");
}

TEST(SchemaEngine, RequiredFieldsAreReportedOnceEvenWhenInvalid) {
  const auto issues = config_issues([] { load("name: [x]\n"); });
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].str(), "toy.yaml:1: name: expected a non-empty string, got a list of 1 item");
  EXPECT_EQ(first_error("rate: 0.1\n"), "toy.yaml: name: missing required value (a name)");
}

TEST(SchemaEngine, UnknownKeysGetSuggestions) {
  EXPECT_EQ(first_error("name: a\nrat: 0.1\n"), "toy.yaml:2: rat: unknown key (did you mean rate?)");
  EXPECT_EQ(first_error("name: a\ncount: 2\n"), "toy.yaml:2: count: unknown key (did you mean inner.count?)");
  EXPECT_EQ(first_error("name: a\nzzz: 2\n"),
            "toy.yaml:2: zzz: unknown key; the top level has: rate, on, name, weights, inner");
}

TEST(SchemaEngine, OverridesAndOriginsAreTracked) {
  Toy t;
  Loader loader(toy_schema(), &t);
  loader.apply_text("name: a\ninner:\n  count: 4\n", "toy.yaml");
  loader.apply_override("inner.mode=slow");
  EXPECT_TRUE(loader.ok());
  EXPECT_EQ(loader.origin("inner.count").str(), "toy.yaml:3");
  EXPECT_EQ(loader.origin("inner.mode").str(), "--set");
  EXPECT_EQ(loader.origin("on").str(), "toy.yaml");  // not given: the file, no line
  EXPECT_FALSE(loader.given("rate"));
  EXPECT_TRUE(loader.given("inner"));
}

TEST(SchemaEngine, ToYamlOmitsWhatTheCallerSays) {
  Toy t;
  t.name = "x";
  const std::string all = toy_schema().to_yaml(t);
  EXPECT_EQ(all,
            "rate: 0.5\non: true\nname: x\nweights: [1.0, 2.0, 3.0]\ninner:\n  count: 3\n  mode: fast\n  sealed: true\n");
  const std::string some = toy_schema().to_yaml(t, [](const Field& f) { return f.path == "inner"; });
  EXPECT_EQ(some.find("inner"), std::string::npos);
  EXPECT_EQ(toy_schema().to_yaml(t, [](const Field& f) { return f.path.rfind("inner.", 0) == 0; }).find("inner: {}"),
            all.find("inner:"));
}

TEST(SchemaEngine, WrongRootTypeIsABug) {
  int not_a_toy = 0;
  EXPECT_THROW((Loader(toy_schema(), &not_a_toy)), std::logic_error);
}

TEST(SchemaEngine, DeclaringAKeyTwiceIsABug) {
  Schema s("dup");
  auto root = s.root<Inner>();
  root.integer(&Inner::count, "count", "a");
  EXPECT_THROW(root.integer(&Inner::count, "count", "b"), std::logic_error);
}

// ------------------------------------------------------------------------------ scalars

YAML::Node scalar(const std::string& text) { return YAML::Load("v: " + text)["v"]; }

TEST(YamlScalars, NumbersFollowTheYaml12CoreSchema) {
  EXPECT_EQ(parse_number(scalar("3e-4")), 3e-4);
  EXPECT_EQ(parse_number(scalar("+.5")), 0.5);
  EXPECT_EQ(parse_number(scalar("-2.")), -2.0);
  EXPECT_EQ(parse_number(scalar("!!float 1")), 1.0);
  for (const char* bad : {"\"1\"", "'1'", ".inf", ".nan", "0x10", "1e", "e3", "1,5", "1e999", "inf", "nan", "--1", ""}) {
    EXPECT_FALSE(parse_number(scalar(bad))) << bad;
  }
}

TEST(YamlScalars, IntegersAndBooleans) {
  EXPECT_EQ(parse_integer(scalar("-12")), -12);
  EXPECT_EQ(parse_integer(scalar("2e3")), 2000);
  EXPECT_EQ(parse_integer(scalar("9223372036854775807")), INT64_MAX);
  EXPECT_FALSE(parse_integer(scalar("1.5")));
  EXPECT_FALSE(parse_integer(scalar("1e30")));
  EXPECT_EQ(parse_bool(scalar("True")), true);
  EXPECT_EQ(parse_bool(scalar("FALSE")), false);
  EXPECT_FALSE(parse_bool(scalar("yes")));
  EXPECT_FALSE(parse_bool(scalar("\"true\"")));
}

TEST(YamlScalars, DescribedValuesQuoteOnlyStrings) {
  EXPECT_EQ(describe_value(scalar("fast")), "\"fast\"");
  EXPECT_EQ(describe_value(scalar("-3")), "-3");
  EXPECT_EQ(describe_value(scalar("\"-3\"")), "\"-3\"");
  EXPECT_EQ(describe_value(scalar("true")), "true");
  EXPECT_EQ(describe_value(scalar("")), "nothing");
  EXPECT_EQ(describe_value(scalar("{a: 1}")), "a map");
  EXPECT_EQ(describe_value(scalar(std::string(100, 'x'))), "\"" + std::string(60, 'x') + "...\"");
}

TEST(YamlScalars, FormattedNumbersParseBackExactly) {
  std::mt19937_64 rng(5);
  std::vector<double> values = {0.0, -0.0, 1.0, 0.1, 1e-4, 9.99e-5, 1e15, 123456789012345678.0, 5e-324, 1.7976931348623157e308};
  for (int i = 0; i < 2000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) values.push_back(d);
  }
  for (const double v : values) {
    const std::string text = format_number(v);
    const auto back = parse_number(scalar(text));
    ASSERT_TRUE(back) << text;
    EXPECT_EQ(*back, v) << text;
  }
  EXPECT_EQ(format_number(0.0005), "0.0005");
  EXPECT_EQ(format_number(1e-6), "1e-6");
  EXPECT_EQ(format_number(3.0), "3.0");
  EXPECT_EQ(format_number(2e20), "2e20");
}

TEST(YamlScalars, FormattedStringsParseBackAsTheSameString) {
  for (const std::string s : {"", "plain", "runs/{recipe}", "yes", "No", "null", "~", "12", "1e5", "-x", "a: b", "#c",
                              "[x]", "x\ty", "quote\"s", "back\\slash", "cuda:0", " lead", "trail ", "\x01"}) {
    const YAML::Node n = YAML::Load("v: " + format_string(s))["v"];
    ASSERT_TRUE(n.IsScalar()) << format_string(s);
    EXPECT_EQ(n.Scalar(), s) << format_string(s);
    EXPECT_FALSE(parse_number(n) || parse_bool(n)) << format_string(s);
  }
  EXPECT_EQ(format_string("work/wordnet/train.txt"), "work/wordnet/train.txt");
}

}  // namespace
}  // namespace tarn::config
