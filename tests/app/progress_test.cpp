// progress.json (app/progress.h): what progress_json writes parses back unchanged, and
// counters a signed field cannot hold are refused by name instead of wrapping.
#include "app/progress.h"

#include <gtest/gtest.h>

#include <string>

#include "kernels/check.h"
#include "tests/app/progress_sample.h"

namespace tarn::app {
namespace {

using testing::sample_progress;

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(ProgressJson, WrittenProgressParsesBackUnchanged) {
  const std::string text = json::dump(progress_json(sample_progress()), 2);
  EXPECT_EQ(json::dump(progress_json(parse_progress(text, "progress.json")), 2), text);
}

// Found by fuzz/checkpoint_fuzzer's round trip: a step of 2^64 - 1 loaded as -1, and
// progress_json wrote it back as a number no reader accepts.
TEST(ProgressJson, StepAboveInt64MaxIsRefusedNamingFileAndField) {
  const std::string text =
      replace(json::dump(progress_json(sample_progress()), 2), "\"step\": 1200", "\"step\": 18446744073709551615");
  try {
    parse_progress(text, "runs/x/step_1200/progress.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "runs/x/step_1200/progress.json: step: 18446744073709551615 is out of range (at most "
              "9223372036854775807)");
  }
}

TEST(ProgressJson, FavorStepsAboveInt64MaxAreRefused) {
  const std::string text =
      replace(json::dump(progress_json(sample_progress()), 2), "\"steps\": 12", "\"steps\": 9223372036854775808");
  EXPECT_THROW(parse_progress(text, "progress.json"), Error);
}

TEST(ProgressJson, ErrorsNameTheFile) {
  try {
    parse_progress("{\"step\": -1}", "ck/progress.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ck/progress.json: step", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace tarn::app
