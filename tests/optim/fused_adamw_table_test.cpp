// framework/optim/fused_adamw_table.h: the fused AdamW kernels' table and step counts in device
// memory (here the CPU's): laid out once, sent only when a range's has_grad changes, the counts
// written and read back as they were.
#include "framework/optim/fused_adamw_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "framework/optim/adamw.h"

namespace tarn {
namespace {

std::vector<kernels::cpu::AdamWRange> two_ranges() {
  std::vector<kernels::cpu::AdamWRange> r(2);
  r[0].offset = 0, r[0].numel = 5, r[0].weight_decay = 0.1f;
  r[1].offset = 5, r[1].numel = 3;
  return r;
}

TEST(FusedAdamWTable, LaysOutTheRangesAndSendsTheTableWhenItChanges) {
  std::vector<kernels::cpu::AdamWRange> want = two_ranges();
  const int64_t blocks = kernels::cpu::adamw_fused_layout(want.data(), 2);
  FusedAdamWTable t(two_ranges(), Device::cpu());
  EXPECT_EQ(t.size(), 2);
  EXPECT_EQ(t.blocks(), blocks);
  t.set_has_grad(0, true);
  t.set_has_grad(1, false);
  t.upload();
  want[0].has_grad = 1;
  EXPECT_EQ(std::memcmp(t.ranges(), want.data(), sizeof(kernels::cpu::AdamWRange) * 2), 0);
  // Unchanged flags send nothing: a change made behind the table's back stays.
  auto* device = const_cast<kernels::cpu::AdamWRange*>(t.ranges());
  device[1].numel = 99;
  t.set_has_grad(0, true);
  t.set_has_grad(1, false);
  t.upload();
  EXPECT_EQ(t.ranges()[1].numel, 99);
  // A changed flag sends the whole table again.
  t.set_has_grad(1, true);
  t.upload();
  EXPECT_EQ(t.ranges()[1].numel, 3);
  EXPECT_EQ(t.ranges()[1].has_grad, 1);
  EXPECT_EQ(t.ranges()[1].first_block, want[1].first_block);
}

TEST(FusedAdamWTable, CountsRoundTrip) {
  FusedAdamWTable t(two_ranges(), Device::cpu());
  t.write_counts(7, {7, 4});
  EXPECT_EQ(*t.applied_steps(), 7);
  EXPECT_EQ(t.states()[0].step, 7);
  EXPECT_EQ(t.states()[1].step, 4);
  t.states()[1].step = 5;  // as a kernel would
  std::vector<int64_t> steps;
  EXPECT_EQ(t.read_counts(steps), 7);
  EXPECT_EQ(steps, (std::vector<int64_t>{7, 5}));
}

TEST(FusedAdamWTable, HyperTakesTheStepsLrAndNorm) {
  AdamWOptions o;
  o.lr = 1.0f, o.beta1 = 0.8f, o.beta2 = 0.95f, o.eps = 1e-6f;
  const kernels::cpu::AdamWFusedHyper h = fused_hyper(o, 0.25f, 2.0f);
  EXPECT_EQ(h.lr, 0.25f);
  EXPECT_EQ(h.beta1, 0.8f);
  EXPECT_EQ(h.beta2, 0.95f);
  EXPECT_EQ(h.eps, 1e-6f);
  EXPECT_EQ(h.max_norm, 2.0f);
}

}  // namespace
}  // namespace tarn
