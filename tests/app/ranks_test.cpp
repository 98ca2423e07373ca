// The ranks of a run (app/ranks.h): which communicators carry control values and gradients,
// where a rank runs, and the lines a data-parallel run starts with.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "kernels/collectives.h"
#include "app/ranks.h"

namespace tarn::app {
namespace {

TEST(Ranks, AGivenCommunicatorCarriesControlValuesAndCpuGradients) {
  const auto given = kernels::solo_communicator();
  Ranks ranks(given.get(), 60);
  ranks.open_gradients(Recipe{}, Device::cpu());
  EXPECT_EQ(&ranks.control(), given.get());
  EXPECT_EQ(&ranks.gradients(), given.get());
  EXPECT_TRUE(ranks.lead());
  EXPECT_TRUE(ranks.solo());
}

TEST(Ranks, WithoutACommunicatorOrALauncherOneRankCommunicatesNothing) {
  Ranks ranks(nullptr, 60);
  EXPECT_EQ(ranks.world(), 1);
  EXPECT_EQ(ranks.rank(), 0);
  EXPECT_STREQ(ranks.control().backend(), "solo");
  testing::internal::CaptureStderr();
  ranks.log(Recipe{}, Device::cpu());  // nothing to say on one rank
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Ranks, AGivenGroupKeepsTheRecipesDeviceAndThreads) {
  // Only ranks an MPI launcher started take their machine's GPU and share its cores.
  auto group = kernels::cpu::thread_communicators(2);
  Ranks ranks(group[1].get(), 60);
  EXPECT_EQ(ranks.rank(), 1);
  EXPECT_FALSE(ranks.lead());
  EXPECT_FALSE(ranks.solo());
  Recipe recipe;
  recipe.training.device = "cuda";
  recipe.training.threads = 0;
  ranks.place(recipe);
  EXPECT_EQ(recipe.training.device, "cuda");
  EXPECT_EQ(recipe.training.threads, 0);
}

TEST(Ranks, TwoRanksSayWhoRunsWhereAndWhatAGlobalBatchIs) {
  auto group = kernels::cpu::thread_communicators(2);
  Recipe recipe;
  recipe.training.tokens_per_batch = 1000;
  recipe.training.grad_accumulation = 3;
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Ranks ranks(group[static_cast<size_t>(r)].get(), 60);
      ranks.open_gradients(recipe, Device::cpu());
      EXPECT_EQ(&ranks.gradients(), &ranks.control()) << "host gradients go through the control communicator";
      ranks.log(recipe, Device::cpu());  // collective (both ranks log here: one process, no MPI rank set)
    });
  for (auto& t : threads) t.join();
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("2 ranks (cpu-threads); only rank 0 logs and writes checkpoints"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0: cpu, "), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1: cpu, "), std::string::npos) << out;
  EXPECT_NE(out.find(" threads, gradients by cpu-threads"), std::string::npos) << out;
  EXPECT_NE(out.find("batch: 1,000 padded tokens per global batch, ~500 per rank x 2 ranks x 3 accumulation = "
                     "3,000 per optimizer step"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace tarn::app
