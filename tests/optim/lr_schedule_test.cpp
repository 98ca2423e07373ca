// framework/optim/lr_schedule.h at the points that define each schedule: step 0, the end of
// warm-up, the middle of the decay, its end and beyond.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "framework/optim/lr_schedule.h"
#include "kernels/check.h"

namespace tarn {
namespace {

constexpr float kLr = 1e-3f;

LrSchedule make(const char* kind, int64_t warmup, int64_t total, float min_lr = 0.0f) {
  LrSchedule s;
  s.kind = parse_lr_schedule_kind(kind);
  s.lr = kLr;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.min_lr = min_lr;
  s.validate();
  return s;
}

TEST(LrSchedule, WarmupRisesLinearlyFromZeroToPeak) {
  for (const char* kind : {"constant", "linear", "cosine", "inverse_sqrt"}) {
    const LrSchedule s = make(kind, 100, 1000);
    EXPECT_EQ(s.lr_at(0), 0.0f) << kind;
    EXPECT_FLOAT_EQ(s.lr_at(25), kLr * 0.25f) << kind;
    EXPECT_FLOAT_EQ(s.lr_at(99), kLr * 0.99f) << kind;
    EXPECT_FLOAT_EQ(s.lr_at(100), kLr) << kind;  // end of warm-up: the peak
  }
}

TEST(LrSchedule, ConstantStaysAtPeak) {
  const LrSchedule s = make("constant", 0, 0);
  for (int64_t step : {0, 1, 1000, 1000000}) EXPECT_EQ(s.lr_at(step), kLr);
}

TEST(LrSchedule, LinearDecaysToZeroAtTotalSteps) {
  const LrSchedule s = make("linear", 100, 1100);
  EXPECT_FLOAT_EQ(s.lr_at(600), kLr * 0.5f);  // middle of the decay
  EXPECT_FLOAT_EQ(s.lr_at(850), kLr * 0.25f);
  EXPECT_EQ(s.lr_at(1100), 0.0f);
  EXPECT_EQ(s.lr_at(5000), 0.0f);
}

TEST(LrSchedule, LinearWithFloorEndsAtMinLr) {
  const LrSchedule s = make("linear", 0, 1000, 1e-4f);
  EXPECT_FLOAT_EQ(s.lr_at(0), kLr);
  EXPECT_FLOAT_EQ(s.lr_at(500), 0.5f * (kLr + 1e-4f));
  EXPECT_FLOAT_EQ(s.lr_at(1000), 1e-4f);
  EXPECT_FLOAT_EQ(s.lr_at(2000), 1e-4f);
}

TEST(LrSchedule, CosineFollowsHalfACosine) {
  const LrSchedule s = make("cosine", 100, 1100);
  EXPECT_FLOAT_EQ(s.lr_at(600), kLr * 0.5f);
  EXPECT_NEAR(s.lr_at(350), kLr * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-9);
  EXPECT_NEAR(s.lr_at(1100), 0.0f, 1e-12);
  EXPECT_NEAR(s.lr_at(3000), 0.0f, 1e-12);
  const LrSchedule floor = make("cosine", 100, 1100, 2e-4f);
  EXPECT_FLOAT_EQ(floor.lr_at(600), 2e-4f + (kLr - 2e-4f) * 0.5f);
  EXPECT_FLOAT_EQ(floor.lr_at(1100), 2e-4f);
}

TEST(LrSchedule, InverseSqrtMatchesFairseqAfterWarmup) {
  const LrSchedule s = make("inverse_sqrt", 400, 0);
  EXPECT_FLOAT_EQ(s.lr_at(400), kLr);
  EXPECT_FLOAT_EQ(s.lr_at(1600), kLr * 0.5f);  // lr * sqrt(400) / sqrt(1600)
  EXPECT_FLOAT_EQ(s.lr_at(40000), kLr * 0.1f);
  const LrSchedule no_warmup = make("inverse_sqrt", 0, 0);
  EXPECT_FLOAT_EQ(no_warmup.lr_at(0), kLr);
  EXPECT_FLOAT_EQ(no_warmup.lr_at(1), kLr);
  EXPECT_FLOAT_EQ(no_warmup.lr_at(4), kLr * 0.5f);
  const LrSchedule floored = make("inverse_sqrt", 400, 0, 3e-4f);
  EXPECT_FLOAT_EQ(floored.lr_at(40000), 3e-4f);
}

TEST(LrSchedule, KindNamesRoundTrip) {
  for (const char* kind : {"constant", "linear", "cosine", "inverse_sqrt"})
    EXPECT_STREQ(lr_schedule_kind_name(parse_lr_schedule_kind(kind)), kind);
}

TEST(LrSchedule, UnknownKindErrorNamesItAndListsTheKnownOnes) {
  try {
    parse_lr_schedule_kind("cosine_with_restarts");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("\"cosine_with_restarts\""), std::string::npos) << m;
    EXPECT_NE(m.find("constant, linear, cosine, inverse_sqrt"), std::string::npos) << m;
  }
}

TEST(LrSchedule, ValidateRejectsInconsistentSettings) {
  LrSchedule s;
  s.kind = LrScheduleKind::linear;
  s.total_steps = 0;
  EXPECT_THROW(s.validate(), Error);  // linear needs an end
  s.total_steps = 10;
  s.warmup_steps = 20;
  EXPECT_THROW(s.validate(), Error);  // warm-up past the end
  s.warmup_steps = 5;
  s.min_lr = 2 * s.lr;
  EXPECT_THROW(s.validate(), Error);  // floor above the peak
  s.min_lr = 0;
  s.lr = -1;
  EXPECT_THROW(s.validate(), Error);
  s.lr = 1e-3f;
  EXPECT_NO_THROW(s.validate());
  EXPECT_THROW(s.lr_at(-1), Error);
}

}  // namespace
}  // namespace tarn
