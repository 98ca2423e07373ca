// framework/train/run_control.h: the stop decision every rank agrees on, and the cadence of the
// periodic actions.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "framework/train/run_control.h"
#include "kernels/collectives.h"

namespace tarn {
namespace {

StopReason alone(const StopLimits& limits, const RunPosition& at) {
  auto comm = kernels::solo_communicator();
  return agreed_stop_reason(limits, at, *comm);
}

TEST(StopReason, EachLimitStopsTheRunInItsOrderOfPrecedence) {
  StopLimits limits;
  limits.max_steps = 100;
  limits.max_epochs = 3;
  limits.max_time_s = 60;
  limits.max_bad_steps = 5;
  limits.patience = 2;
  RunPosition at;
  at.step = 10;
  EXPECT_EQ(alone(limits, at), StopReason::none);
  at.evals_without_improvement = 2;
  EXPECT_EQ(alone(limits, at), StopReason::early_stopping);
  at.bad_steps_in_row = 5;
  EXPECT_EQ(alone(limits, at), StopReason::bad_steps);
  at.elapsed_s = 60;
  EXPECT_EQ(alone(limits, at), StopReason::max_time);
  at.epoch = 3;
  EXPECT_EQ(alone(limits, at), StopReason::max_epochs);
  at.step = 100;
  EXPECT_EQ(alone(limits, at), StopReason::max_steps);
  EXPECT_STREQ(stop_reason_name(StopReason::max_steps), "max_steps");
  EXPECT_STREQ(stop_reason_name(StopReason::bad_steps), "non-finite");
  EXPECT_STREQ(stop_reason_name(StopReason::none), "");
}

TEST(StopReason, ZeroMeansNoLimit) {
  StopLimits none;
  none.max_bad_steps = 1000;
  RunPosition far;
  far.step = 1 << 30;
  far.epoch = 1 << 20;
  far.elapsed_s = 1e9;
  far.evals_without_improvement = 1 << 20;
  EXPECT_EQ(alone(none, far), StopReason::none);
}

TEST(StopReason, OneRanksClockPastTheBudgetStopsEveryRank) {
  const auto comms = kernels::cpu::thread_communicators(3);
  std::vector<StopReason> got(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      StopLimits limits;
      limits.max_time_s = 100;
      RunPosition at;
      at.elapsed_s = r == 2 ? 100.5 : 99.0;  // only rank 2's clock has run out
      got[static_cast<size_t>(r)] = agreed_stop_reason(limits, at, *comms[static_cast<size_t>(r)]);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], StopReason::max_time) << "rank " << r;
}

TEST(Cadence, ActionsFallOnTheirMultiplesAndZeroMeansNever) {
  Cadence c;
  c.log_every = 10;
  c.validate_every = 50;
  c.checkpoint_every = 0;
  EXPECT_TRUE(c.logs_at(20));
  EXPECT_FALSE(c.logs_at(25));
  EXPECT_TRUE(c.validates_at(100));
  EXPECT_FALSE(c.checkpoints_at(100));
  EXPECT_FALSE(c.checks_replicas_at(100));
  // At the end: validate unless the last step did, or a signal cut the run short.
  EXPECT_FALSE(c.validates_at_end(StopReason::max_steps, 100));
  EXPECT_TRUE(c.validates_at_end(StopReason::max_steps, 101));
  EXPECT_FALSE(c.validates_at_end(StopReason::sigint, 101));
  EXPECT_FALSE(c.validates_at_end(StopReason::sigterm, 101));
  c.validate_every = 0;
  EXPECT_TRUE(c.validates_at_end(StopReason::max_time, 100));
}

}  // namespace
}  // namespace tarn
