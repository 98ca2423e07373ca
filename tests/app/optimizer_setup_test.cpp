// The optimizer a recipe asks for (app/optimizer_setup.h).
#include <gtest/gtest.h>

#include "framework/config/config_error.h"
#include "app/optimizer_setup.h"

namespace tarn::app {
namespace {

TEST(OptimizerSetup, TheStepTakesTheOptimizerAndTrainingSettings) {
  Recipe r;
  r.optimizer.lr = 3e-4;
  r.optimizer.betas = {0.8, 0.95};
  r.optimizer.eps = 1e-6;
  r.optimizer.weight_decay = 0.1;
  r.optimizer.clip_norm = 0.5;
  r.training.shard_optimizer = true;
  r.training.overlap_communication = false;
  r.training.gradient_bucket_mb = 2;
  const TrainStepOptions o = train_step_options(r);
  EXPECT_EQ(o.adamw.lr, 3e-4f);
  EXPECT_EQ(o.adamw.beta1, 0.8f);
  EXPECT_EQ(o.adamw.beta2, 0.95f);
  EXPECT_EQ(o.adamw.eps, 1e-6f);
  EXPECT_EQ(o.adamw.weight_decay, 0.1f);
  EXPECT_EQ(o.clip_norm, 0.5f);
  EXPECT_TRUE(o.shard_optimizer);
  EXPECT_FALSE(o.overlap_communication);
  EXPECT_EQ(o.bucket_bytes, 2 << 20);
  r.training.gradient_bucket_mb = 1e300;  // no overflow: bounded far above any model
  EXPECT_EQ(train_step_options(r).bucket_bytes, static_cast<int64_t>(1e15));
}

TEST(OptimizerSetup, TheScheduleDecaysToMaxStepsFromThePeakLr) {
  Recipe r;
  r.optimizer.schedule = "cosine";
  r.optimizer.lr = 1e-3;
  r.optimizer.warmup_steps = 10;
  r.optimizer.min_lr = 1e-5;
  r.training.max_steps = 100;
  const LrSchedule s = lr_schedule(r);
  EXPECT_EQ(s.kind, LrScheduleKind::cosine);
  EXPECT_EQ(s.lr, 1e-3f);
  EXPECT_EQ(s.warmup_steps, 10);
  EXPECT_EQ(s.total_steps, 100);
  EXPECT_EQ(s.min_lr, 1e-5f);
}

TEST(OptimizerSetup, ADecayToUnlimitedStepsIsAConfigErrorAtTheSchedule) {
  Recipe r;
  r.training.max_steps = 0;
  for (const char* kind : {"linear", "cosine"}) {
    r.optimizer.schedule = kind;
    try {
      lr_schedule(r);
      ADD_FAILURE() << kind << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer.schedule"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("decays to training.max_steps, which is 0"), std::string::npos) << e.what();
    }
  }
  r.optimizer.schedule = "inverse_sqrt";  // needs no end
  EXPECT_EQ(lr_schedule(r).total_steps, 0);
}

}  // namespace
}  // namespace tarn::app
