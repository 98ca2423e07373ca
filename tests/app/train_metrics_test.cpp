// What a training run reports (app/train_metrics.h): the metrics file's lines, the TensorBoard
// scalars beside them, and the intervals the progress line averages over.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/config/config_error.h"
#include "framework/io/json.h"
#include "framework/log/tensorboard.h"
#include "app/train_metrics.h"
#include "tests/app/app_test_util.h"

namespace tarn::app {
namespace {

std::vector<json::Json> lines_of(const std::string& path) {
  std::vector<json::Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line, path));
  return out;
}

double number(const json::Json& v, const char* key) {
  const json::Json* f = json::find(v, key);
  if (f == nullptr || !f->is_number()) {
    ADD_FAILURE() << key << " is missing or not a number in " << json::dump(v);
    return NAN;
  }
  return json::as_double(*f, key);
}

Recipe recipe_in(const std::string& dir, const std::string& tensorboard = "off") {
  Recipe r;
  r.logging.metrics_file = dir + "/logs/metrics.jsonl";  // its folder is created
  r.logging.tensorboard = tensorboard;
  r.training.max_steps = 100;
  return r;
}

StepResult applied(double loss_sum, double nll_sum, int64_t tokens, double grad_norm) {
  StepResult r;
  r.loss_sum = loss_sum;
  r.nll_sum = nll_sum;
  r.tokens = tokens;
  r.grad_norm = grad_norm;
  return r;
}

TEST(TrainMetrics, ALoggedIntervalIsOneTrainLineOfItsMeansThenANewIntervalStarts) {
  const std::string dir = testing::fresh_dir("metrics_interval");
  const Recipe recipe = recipe_in(dir);
  TrainMetrics m;
  m.open(recipe, 0);
  EXPECT_FALSE(m.has_tensorboard());
  m.start();
  m.took_step(2e-4f);
  m.add(applied(30, 25, 100, 1.0), 10);  // loss 3 per label
  m.took_step(1e-4f);
  m.add(applied(10, 15, 60, 3.0), 10);  // loss 1
  Progress p;
  p.step = 2;
  p.data.epoch = 1;
  p.tokens_seen = 500;
  const std::optional<double> loss = m.log_interval(p, recipe.training, 12.5);
  ASSERT_TRUE(loss.has_value());
  EXPECT_DOUBLE_EQ(*loss, 2.0);
  EXPECT_EQ(m.tokens_this_run(), 160);
  EXPECT_FALSE(m.log_interval(p, recipe.training, 13).has_value()) << "no step since the last line";
  const auto lines = lines_of(recipe.logging.metrics_file);
  ASSERT_EQ(lines.size(), 1u);
  const json::Json& t = lines[0];
  EXPECT_EQ(json::as_string(t.at("kind"), "kind"), "train");
  EXPECT_EQ(number(t, "step"), 2);
  EXPECT_EQ(number(t, "epoch"), 1);
  EXPECT_DOUBLE_EQ(number(t, "loss"), 2.0);
  EXPECT_DOUBLE_EQ(number(t, "nll"), 2.0);  // (25 + 15) / 20 labels
  EXPECT_DOUBLE_EQ(number(t, "ppl"), std::exp(2.0));
  EXPECT_EQ(number(t, "lr"), static_cast<double>(1e-4f)) << "the last step's";
  EXPECT_DOUBLE_EQ(number(t, "grad_norm"), 2.0);
  EXPECT_GT(number(t, "tokens_per_s"), 0);
  EXPECT_EQ(number(t, "tokens_seen"), 500);
  EXPECT_EQ(number(t, "elapsed_s"), 12.5);
  m.start();  // a new run's counts
  EXPECT_EQ(m.tokens_this_run(), 0);
}

TEST(TrainMetrics, AMetricThatIsNotFiniteIsNullAndTheLineStaysValidJson) {
  const std::string dir = testing::fresh_dir("metrics_null");
  const Recipe recipe = recipe_in(dir);
  TrainMetrics m;
  m.open(recipe, 0);
  m.start();
  m.add(applied(10, 1e6, 10, 1.0), 1);  // exp(1e6) overflows
  ASSERT_TRUE(m.log_interval(Progress{}, recipe.training, 1).has_value());
  const auto lines = lines_of(recipe.logging.metrics_file);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_NE(json::find(lines[0], "ppl"), nullptr);
  EXPECT_TRUE(json::find(lines[0], "ppl")->is_null());
  EXPECT_TRUE(json::find(lines[0], "nll")->is_number());
}

TEST(TrainMetrics, AValidationIsOneValidLineWithTheMemorySoFar) {
  const std::string dir = testing::fresh_dir("metrics_valid");
  const Recipe recipe = recipe_in(dir);
  TrainMetrics m;
  m.open(recipe, 0);
  ValidationReport v;
  v.result.nll_sum = 30;
  v.result.tokens = 10;
  v.best = true;
  v.memory.high_water_bytes = 1 << 20;
  v.memory.cached_bytes = 4096;
  v.resident.peak_bytes = 3 << 20;
  Progress p;
  p.step = 7;
  p.tokens_seen = 900;
  m.log_validation(p, v, 4, Device::cpu());
  const auto lines = lines_of(recipe.logging.metrics_file);
  ASSERT_EQ(lines.size(), 1u);
  const json::Json& l = lines[0];
  EXPECT_EQ(json::as_string(l.at("kind"), "kind"), "valid");
  EXPECT_EQ(number(l, "step"), 7);
  EXPECT_DOUBLE_EQ(number(l, "nll"), 3.0);
  EXPECT_DOUBLE_EQ(number(l, "ppl"), v.result.perplexity());
  EXPECT_EQ(number(l, "tokens"), 10);
  EXPECT_TRUE(json::as_bool(l.at("best"), "best"));
  EXPECT_EQ(number(l, "tokens_seen"), 900);
  EXPECT_EQ(number(l, "elapsed_s"), 4);
  EXPECT_EQ(number(l, "memory_live_peak_bytes"), 1 << 20);
  EXPECT_EQ(number(l, "memory_cached_bytes"), 4096);
  EXPECT_EQ(number(l, "rss_peak_bytes"), 3 << 20);
}

TEST(TrainMetrics, TensorBoardGetsItsOwnFileInTheFolderUnlessOff) {
  const std::string dir = testing::fresh_dir("metrics_tensorboard");
  EXPECT_EQ(tensorboard_folder(recipe_in(dir)), "");
  const Recipe recipe = recipe_in(dir, dir + "/tb");
  EXPECT_EQ(tensorboard_folder(recipe), dir + "/tb");
  TrainMetrics m;
  m.open(recipe, 0);
  EXPECT_TRUE(m.has_tensorboard());
  m.start();
  m.add(applied(10, 10, 10, 1.0), 10);
  m.log_interval(Progress{}, recipe.training, 1);
  m.log_test(0, EvalResult{}, "test.txt");
  const auto files = list_event_files(dir + "/tb");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_GT(std::filesystem::file_size(files[0]), 100u) << "the version record and two events";
}

TEST(TrainMetrics, ARecordNotOpenedWritesNothingButStillAverages) {
  // Ranks other than 0 never open theirs.
  TrainMetrics m;
  m.start();
  m.add(applied(8, 8, 10, 1.0), 4);
  const std::optional<double> loss = m.log_interval(Progress{}, TrainingRecipe{}, 1);
  ASSERT_TRUE(loss.has_value());
  EXPECT_DOUBLE_EQ(*loss, 2.0);
}

TEST(TrainMetrics, AMetricsFileThatCannotBeOpenedIsAConfigErrorNamingTheKey) {
  const std::string dir = testing::fresh_dir("metrics_unopenable");
  std::ofstream(dir + "/file") << "x";
  Recipe recipe = recipe_in(dir);
  recipe.logging.metrics_file = dir + "/file/metrics.jsonl";  // under a file
  TrainMetrics m;
  try {
    m.open(recipe, 0);
    ADD_FAILURE() << "opened";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("logging.metrics_file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tarn::app
