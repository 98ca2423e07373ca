// TrainStep (framework/train/step.h) on the tiny BART on cuda:0, counting what makes the host
// wait for the device (the emulator's runtime stand-ins count them: kernels/emu/emu.h,
// HostWaits). One rank on a CUDA device defers the step's results: a step that does not log
// reads nothing back, and settle() reads every pending step's record in one copy; the results
// and the parameters are the bits of the step that reads them at once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/ops/elementwise.h"
#include "framework/ops/nn.h"
#include "framework/staging.h"
#include "framework/train/step.h"
#include "kernels/collectives.h"
#include "kernels/emu/emu.h"
#include "layers/bart.h"
#include "tests/cuda_model/emulated_cuda.h"
#include "tests/layers/layers_test_util.h"

namespace tarn {
namespace {

constexpr int64_t kMicroBatches = 2;

// The tiny model (linear attention, elu1) on the device and one fixed batch: two sequences of 7
// source and 5 target tokens, the second padded in its last two source positions.
struct DeviceRun {
  BartForConditionalGeneration model;
  std::unique_ptr<kernels::Communicator> comm = kernels::solo_communicator();
  std::unique_ptr<TrainStep> step;
  Shape src_shape{2, 7}, tgt_shape{2, 5};
  std::vector<int32_t> src = testing::random_ids(14, 48, 3), tgt_in = testing::random_ids(10, 48, 4),
                       labels = testing::random_ids(10, 48, 5);
  PaddingMask pad = PaddingMask(14, 0);
  std::vector<int32_t> targets;  // the loss's: labels with the pad id as ignore_index

  bool stage = false;  // the batch up in one asynchronous copy (framework/staging.h), as the trainer does

  explicit DeviceRun(TrainStepOptions::Defer defer, bool staged = false)
      : model(testing::config_for(testing::attention_setups()[1]), 11), stage(staged) {
    model.to(testing::emulated_cuda());
    pad[12] = pad[13] = 1;
    targets = seq2seq_targets(labels, model.config().pad_token_id);
    TrainStepOptions o;
    o.clip_norm = 1.0f;
    o.defer_results = defer;
    step = std::make_unique<TrainStep>(model, *comm, *comm, o);
  }
  // As the trainer's forward: the NLL stays in the loss's totals.
  std::optional<MicroBatchLoss> forward(int64_t) {
    std::optional<StagedBatch> staged;
    if (stage) {  // the padding as its two rows' lengths, the mask built on the device
      staged.emplace(testing::emulated_cuda(), std::vector<const std::vector<int32_t>*>{&src, &tgt_in, &targets},
                     std::vector<const std::vector<uint8_t>*>{&pad}, std::vector<int64_t>{src_shape[0]});
      EXPECT_EQ(staged->masks_from_lengths(), 1);
    }
    MicroBatchLoss m;
    m.loss = seq2seq_loss(model.forward(src, src_shape, pad, tgt_in, tgt_shape), stage ? targets : labels,
                          model.config().pad_token_id,
                          0.0f, &m.counted, nullptr, CrossEntropyOptions{}.ignore_index, &m.totals);
    m.tokens = 24;
    return m;
  }
  StepResult run() {
    return step->run(kMicroBatches, 2 * kMicroBatches * 5, [this](int64_t k) { return forward(k); }, 1e-3f);
  }
};

emu::HostWaits waits_of(const std::function<void()>& f) {
  emu::reset_host_waits();
  f();
  return emu::host_waits();
}

// Before this (issue 51), a step of this model read back 97 values: the loss (its sums in the
// forward, loss.item() in the step, dy.item() in the backward: 3 per micro-batch) and the
// gradient norm of each of its 91 parameter tensors. Now a deferred step reads none. What
// still goes to the device unstaged, 7 copies per micro-batch, is the batch (the next test
// stages it in one copy that does not wait).
TEST(StepOnCuda, ADeferredStepReadsNothingBackAndSettleReadsOnce) {
  DeviceRun r(TrainStepOptions::Defer::automatic);
  ASSERT_TRUE(r.step->defers()) << "one rank on a CUDA device defers by default";
  r.run();  // the first step also uploads the optimizer's table of ranges (once)
  for (int s = 0; s < 2; ++s) {
    StepResult result;
    const emu::HostWaits w = waits_of([&] { result = r.run(); });
    EXPECT_TRUE(result.pending());
    EXPECT_EQ(w.copies_to_host, 0u) << "step " << s;
    EXPECT_EQ(w.synchronizations, 0u) << "step " << s;
    EXPECT_LE(w.copies_to_device, 7u * kMicroBatches) << "step " << s;
  }
  std::vector<StepResult> settled;
  const emu::HostWaits w = waits_of([&] { settled = r.step->settle(); });
  EXPECT_EQ(w.copies_to_host, 1u) << "every pending step's record in one copy";
  EXPECT_EQ(w.copies_to_device, 0u);
  ASSERT_EQ(settled.size(), 3u);
  for (const StepResult& s : settled) EXPECT_TRUE(s.applied());
}

// The trainer's way (app/model_io.h, StagedInputs): each micro-batch's token ids, labels and
// padding go up in one asynchronous copy from pinned memory, which the host only queues; the
// position ids are a slice of the position table (nothing to copy) and every attention shares
// the batch's one device mask. Unstaged, the step copies 7 times per micro-batch, each a wait
// on a real device (token ids of both sides, the four attentions' padding masks, the targets;
// before the slice also the position ids of both sides: 9).
TEST(StepOnCuda, AStagedStepQueuesOneCopyPerMicroBatchAndWaitsForNothing) {
  DeviceRun staged(TrainStepOptions::Defer::automatic, /*staged=*/true),
      plain(TrainStepOptions::Defer::automatic);
  staged.run();  // the first step also uploads the optimizer's table of ranges (once)
  plain.run();
  for (int s = 0; s < 2; ++s) {
    const emu::HostWaits w = waits_of([&] { staged.run(); });
    EXPECT_EQ(w.copies_to_host, 0u) << "step " << s;
    EXPECT_EQ(w.synchronizations, 0u) << "step " << s;
    EXPECT_EQ(w.copies_to_device, 0u) << "step " << s;
    EXPECT_EQ(w.async_copies_to_device, static_cast<uint64_t>(kMicroBatches)) << "step " << s;
    const emu::HostWaits u = waits_of([&] { plain.run(); });
    EXPECT_EQ(u.copies_to_device, 7u * kMicroBatches) << "unstaged: ids, masks and targets one by one";
    EXPECT_EQ(u.async_copies_to_device, 0u);
  }
  std::vector<StepResult> a = staged.step->settle(), b = plain.step->settle();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss_sum, b[i].loss_sum) << "step " << i;
  const auto ps = staged.model.named_parameters(), pp = plain.model.named_parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<float> x = ps[i].second->to_vector(), y = pp[i].second->to_vector();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << ps[i].first;
  }
}

// A right-padded mask goes up as its rows' lengths and is built on the device
// (padding_from_lengths): the mask and its complement are the bits the host would have sent;
// a mask with padding before a real position goes up as flags, also the same bits. Either way
// the batch is one queued copy and no wait.
TEST(StagedBatchOnCuda, MasksFromLengthsAreTheBitsOfTheFlags) {
  const Device dev = testing::emulated_cuda();
  const std::vector<int32_t> ids = testing::random_ids(12, 48, 7);
  // 3 rows of 4: lengths 4, 1, 0.
  const PaddingMask right_padded = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1};
  PaddingMask holed = right_padded;
  holed[6] = 0;  // row 1: real, pad, real, pad
  for (const PaddingMask* mask : std::vector<const PaddingMask*>{&right_padded, &holed}) {
    emu::reset_host_waits();
    StagedBatch staged(dev, {&ids}, {mask}, {3});
    const emu::HostWaits w = emu::host_waits();
    EXPECT_EQ(w.async_copies_to_device, 1u);
    EXPECT_EQ(w.copies_to_device, 0u);
    EXPECT_EQ(staged.masks_from_lengths(), mask == &right_padded ? 1 : 0);
    std::vector<float> flags, keep;
    for (uint8_t m : *mask) {
      flags.push_back(m ? 1.0f : 0.0f);
      keep.push_back(m ? 0.0f : 1.0f);
    }
    const std::vector<float> got_flags = staged.mask(*mask, false, dev).to_vector();
    const std::vector<float> got_keep = staged.mask(*mask, true, dev).to_vector();
    EXPECT_EQ(std::memcmp(got_flags.data(), flags.data(), flags.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(got_keep.data(), keep.data(), keep.size() * sizeof(float)), 0);
    const std::vector<float> got_ids = staged.ids(ids, dev).to_vector();
    EXPECT_EQ(std::memcmp(got_ids.data(), ids.data(), ids.size() * sizeof(int32_t)), 0);
  }
}

TEST(StepOnCuda, DeferredResultsAndParametersAreTheBitsOfTheImmediateStep) {
  DeviceRun deferred(TrainStepOptions::Defer::automatic), immediate(TrainStepOptions::Defer::no);
  ASSERT_FALSE(immediate.step->defers());
  std::vector<StepResult> at_once;
  for (int s = 0; s < 3; ++s) {
    deferred.run();
    const emu::HostWaits w = waits_of([&] { at_once.push_back(immediate.run()); });
    // Read at once: each micro-batch's loss and NLL, and the update's outcome.
    if (s > 0) {
      EXPECT_EQ(w.copies_to_host, 2u * kMicroBatches + 1) << "step " << s;
    }
  }
  const std::vector<StepResult> later = deferred.step->settle();
  ASSERT_EQ(later.size(), at_once.size());
  for (size_t i = 0; i < later.size(); ++i) {
    EXPECT_EQ(later[i].outcome, at_once[i].outcome) << "step " << i;
    EXPECT_EQ(later[i].loss_sum, at_once[i].loss_sum) << "step " << i;
    EXPECT_EQ(later[i].nll_sum, at_once[i].nll_sum) << "step " << i;
    EXPECT_EQ(later[i].grad_norm, at_once[i].grad_norm) << "step " << i;
    EXPECT_EQ(later[i].tokens, at_once[i].tokens) << "step " << i;
  }
  const auto pd = deferred.model.named_parameters(), pi = immediate.model.named_parameters();
  ASSERT_EQ(pd.size(), pi.size());
  for (size_t i = 0; i < pd.size(); ++i) {
    const std::vector<float> a = pd[i].second->to_vector(), b = pi[i].second->to_vector();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << pd[i].first;
  }
  EXPECT_EQ(deferred.step->optimizer()->step_count(), 3);
}

// A NaN loss on the device: the step is skipped there (parameters untouched) and settle() says so.
TEST(StepOnCuda, ADeferredNanLossSkipsTheUpdateOnTheDevice) {
  DeviceRun r(TrainStepOptions::Defer::automatic);
  r.run();
  std::vector<std::vector<float>> before;
  for (Tensor* p : r.model.parameters()) before.push_back(p->to_vector());
  const StepResult pending = r.step->run(kMicroBatches, 2 * kMicroBatches * 5, [&](int64_t k) {
    std::optional<MicroBatchLoss> m = r.forward(k);
    if (k == 1) m->loss = mul(m->loss, Tensor::full(Shape{}, NAN, m->loss.device()));
    return m;
  }, 1e-3f);
  EXPECT_TRUE(pending.pending());
  const std::vector<StepResult> settled = r.step->settle();
  ASSERT_EQ(settled.size(), 2u);
  EXPECT_TRUE(settled[0].applied());
  EXPECT_EQ(settled[1].outcome, StepOutcome::nonfinite_loss);
  size_t i = 0;
  for (Tensor* p : r.model.parameters()) EXPECT_EQ(p->to_vector(), before[i++]);
  EXPECT_EQ(r.step->optimizer()->step_count(), 1);
}

}  // namespace
}  // namespace tarn
