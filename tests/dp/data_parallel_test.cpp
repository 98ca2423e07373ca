// Data-parallel training through the trainer as `mpirun -np 2 tarn train` runs it: this suite
// runs under mpiexec with 2 ranks (tests/CMakeLists.txt), every rank running every test. It
// checks the semantics recipes/README.md promises: the rank count changes speed, not results.
//
// Tolerances: 2 ranks sum their gradients in another order than one rank does (each rank sums
// its rows, then the ranks are added), so f32 gradients differ in the last bits, about 1e-7
// relative. After one step the optimizer's first moment is 0.1 x the clipped gradient, which
// is compared to 1e-5 of its largest entry. Over several steps AdamW divides each coordinate
// by its own RMS, so a coordinate whose gradient is ~0 can flip its update sign from such a
// bit difference and move by up to 2 x lr; the parameters are therefore compared by the
// relative L2 norm of their difference, which those few coordinates barely move.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "framework/io/checkpoint_dir.h"
#include "framework/allocator.h"
#include "framework/distributed/parameter_sync.h"
#include "framework/distributed/sharded_adamw.h"
#include "framework/io/safetensors.h"
#include "kernels/backend.h"
#include "kernels/blas_info.h"
#include "kernels/emu/emu.h"
#include "kernels/mpi/mpi.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/nn.h"
#include "framework/train/step.h"
#include "layers/bart.h"
#include "tests/app/app_test_util.h"
#include "tests/cuda_model/emulated_cuda.h"
#include "tests/layers/layers_test_util.h"
#include "app/checkpoint_state.h"
#include "app/evaluate.h"
#include "app/session.h"
#include "app/trainer.h"

namespace tarn::app {
namespace {
using testing::tiny_overrides;
using testing::tiny_recipe;

kernels::Communicator& world() {
  static std::unique_ptr<kernels::Communicator> comm = kernels::mpi::world_communicator(120);
  return *comm;
}

// A corpus under a folder every rank sees: rank 0 writes it, the others wait.
std::string shared_corpus(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("tarn_dp_" + name)).string();
  if (world().rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    testing::write_corpus(dir + "/train.txt", 300, 1);
    testing::write_corpus(dir + "/valid.txt", 40, 2);
  }
  world().barrier();
  return dir;
}

TrainOptions options(const std::string& dir, const std::string& run, int64_t steps, std::vector<std::string> extra,
                     kernels::Communicator* comm) {
  TrainOptions o;
  o.recipe_path = tiny_recipe();
  o.overrides = tiny_overrides(dir, steps);
  o.overrides.insert(o.overrides.end(), {"checkpoints.dir=" + dir + "/" + run, "training.threads=1",
                                         "validation.every_steps=0", "checkpoints.every_steps=0"});
  o.overrides.insert(o.overrides.end(), extra.begin(), extra.end());
  o.communicator = comm;
  return o;
}

// Rank 0 alone runs `o` as a single process would; the other ranks wait for it.
TrainSummary solo_on_rank0(TrainOptions o) {
  TrainSummary s;
  if (world().rank() == 0) {
    const auto solo = kernels::solo_communicator();
    o.communicator = solo.get();
    s = train(o);
  }
  world().barrier();
  return s;
}

std::map<std::string, std::vector<float>> tensors(const std::string& run_dir, int64_t step, const char* file) {
  std::map<std::string, std::vector<float>> out;
  const Checkpoint c = open_checkpoint(checkpoint_dir(run_dir, step));
  for (const auto& [name, t] : load_safetensors(c.path(file)).tensors) out[name] = t.to_vector();
  return out;
}

// ||a - b|| / ||a|| over every tensor of the file, and the largest |a - b| relative to max |a|.
struct Difference {
  double relative_l2 = 0, relative_max = 0;
  size_t bitwise_differ = 0;
};
Difference compare(const std::string& a_run, const std::string& b_run, int64_t step, const char* file,
                   const std::string& only_prefix = "") {
  const auto a = tensors(a_run, step, file), b = tensors(b_run, step, file);
  EXPECT_EQ(a.size(), b.size());
  double diff2 = 0, norm2 = 0, max_diff = 0, max_a = 0;
  Difference d;
  for (const auto& [name, va] : a) {
    if (name.rfind(only_prefix, 0) != 0) continue;
    const auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) {
      ADD_FAILURE() << name << " differs in presence or size";
      continue;
    }
    for (size_t i = 0; i < va.size(); ++i) {
      const double x = va[i], y = it->second[i];
      diff2 += (x - y) * (x - y);
      norm2 += x * x;
      max_diff = std::max(max_diff, std::fabs(x - y));
      max_a = std::max(max_a, std::fabs(x));
      d.bitwise_differ += std::memcmp(&va[i], &it->second[i], sizeof(float)) != 0;
    }
  }
  d.relative_l2 = std::sqrt(diff2 / std::max(norm2, 1e-30));
  d.relative_max = max_diff / std::max(max_a, 1e-30);
  return d;
}

void expect_two_ranks_equal_one(const std::string& name, std::vector<std::string> extra, int64_t steps = 6) {
  const std::string dir = shared_corpus(name);
  extra.push_back("model.dropout=0");  // dropout masks differ per rank by design
  const TrainSummary one_step_dp = train(options(dir, "dp1", 1, extra, &world()));
  solo_on_rank0(options(dir, "solo1", 1, extra, nullptr));
  const TrainSummary dp = train(options(dir, "dp", steps, extra, &world()));
  const TrainSummary solo = solo_on_rank0(options(dir, "solo", steps, extra, nullptr));
  EXPECT_EQ(dp.steps, steps);
  if (world().rank() != 0) return;
  // One step: the first moment is 0.1 x the (clipped) gradient.
  const Difference g = compare(dir + "/dp1", dir + "/solo1", 1, "optimizer.safetensors", "exp_avg.");
  EXPECT_LT(g.relative_max, 1e-5) << "gradients after one step";
  // Several steps: parameters, and the training loss the two runs logged.
  const Difference p = compare(dir + "/dp", dir + "/solo", steps, "model.safetensors");
  EXPECT_LT(p.relative_l2, 1e-4) << "parameters after " << steps << " steps";
  EXPECT_NEAR(dp.train_loss, solo.train_loss, 1e-4 * std::fabs(solo.train_loss));
  const Progress pd = checkpoint_progress(open_checkpoint(checkpoint_dir(dir + "/dp", steps)));
  const Progress ps = checkpoint_progress(open_checkpoint(checkpoint_dir(dir + "/solo", steps)));
  EXPECT_EQ(pd.data, ps.data) << "the global data cursor depends on the rank count";
  EXPECT_EQ(pd.tokens_seen, ps.tokens_seen) << "the ranks did not see exactly the one-rank batches between them";
  (void)one_step_dp;
}

TEST(DataParallel, TwoRanksTrainLikeOneRankOnTheSameGlobalBatches) { expect_two_ranks_equal_one("equal", {}); }

TEST(DataParallel, TwoRanksWithAccumulationTrainLikeOneRankWithAccumulation) {
  expect_two_ranks_equal_one("equal_accum", {"training.grad_accumulation=2", "training.tokens_per_batch=512"});
}

// The GPU path without a GPU: CUDA tensors on the emulated device (host memory), gradients
// over MPI as where NCCL is absent; on a GPU machine the NCCL path runs instead (one GPU per
// rank, which this 2-rank test on one device cannot have).
TEST(DataParallel, TwoRanksOnTheEmulatedCudaDeviceTrainLikeOneRank) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the emulated CUDA device under AddressSanitizer takes minutes per step; the Release suite runs "
                  "this test";
#endif
  kernels::install_cuda_backend(&kernels::cuda_emu::backend());
  // The f32 CUDA scan runs chunks of 32 rows (tiny.yaml's 16 is for the CPU).
  expect_two_ranks_equal_one("emulated_cuda", {"training.device=cuda", "model.attention.decoder_self.chunk=32"}, 2);
}

// ZeRO-1 on the emulated device (issue 51): the trainer's staged batches, the shard's update and
// the gathered state, against one rank's fused update on the same device. The bounds of
// expect_two_ranks_equal_one hold: the gradients and the norm are summed in another order.
TEST(DataParallel, TwoRanksWithZeroOneOnTheEmulatedCudaDeviceTrainLikeOneRank) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the emulated CUDA device under AddressSanitizer takes minutes per step";
#endif
  kernels::install_cuda_backend(&kernels::cuda_emu::backend());
  expect_two_ranks_equal_one("emulated_cuda_zero1", {"training.device=cuda", "model.attention.decoder_self.chunk=32",
                                                     "training.shard_optimizer=true"}, 2);
}

// Overlap starts each bucket's all-reduce during the last backward of the step; the sums are
// elementwise, so with it, without it and with any bucket size the runs agree bit for bit,
// accumulation and dropout included.
TEST(DataParallel, OverlappedGradientBucketsGiveTheBitsOfOneAllReduceAfterTheBackward) {
  const std::string dir = shared_corpus("overlap");
  const std::vector<std::string> common = {"training.grad_accumulation=2"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    return extra;
  };
  const TrainSummary off = train(options(dir, "off", 4, with({"training.overlap_communication=false"}), &world()));
  const TrainSummary big = train(options(dir, "big", 4, with({}), &world()));
  const TrainSummary small = train(options(dir, "small", 4, with({"training.gradient_bucket_mb=0.02"}), &world()));
  EXPECT_EQ(off.buckets_started_early, 0);
  EXPECT_GT(small.buckets_started_early, 4 * 3) << "at least 3 of the ~50 buckets per step start during the backward";
  if (world().rank() != 0) return;
  for (const char* run : {"big", "small"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      EXPECT_EQ(compare(dir + "/off", dir + "/" + run, 4, file).bitwise_differ, 0u) << run << " " << file;
  (void)big;
}

TEST(DataParallel, SmallGlobalBatchesLeaveSomeRanksWithoutRowsAndStillAgree) {
  // 96 tokens: one or two rows per global batch, so a rank's share is sometimes empty.
  expect_two_ranks_equal_one("empty_share", {"training.tokens_per_batch=96"});
}

TEST(DataParallel, StopAndResumeOnTwoRanksIsBitExactAndOneRankContinues) {
  const std::string dir = shared_corpus("resume");
  const std::vector<std::string> extra = {"model.dropout=0.1"};  // each rank its own dropout stream
  train(options(dir, "whole", 8, extra, &world()));
  train(options(dir, "split", 5, extra, &world()));
  const TrainSummary resumed = train(options(dir, "split", 8, extra, &world()));
  EXPECT_EQ(resumed.steps_this_run, 3);
  if (world().rank() == 0) {
    EXPECT_EQ(compare(dir + "/whole", dir + "/split", 8, "model.safetensors").bitwise_differ, 0u);
    EXPECT_EQ(compare(dir + "/whole", dir + "/split", 8, "optimizer.safetensors").bitwise_differ, 0u);
    const Progress p = checkpoint_progress(open_checkpoint(checkpoint_dir(dir + "/split", 8)));
    ASSERT_EQ(p.rank_dropout.size(), 2u);
    EXPECT_NE(p.rank_dropout[0].seed, p.rank_dropout[1].seed) << "both ranks drew the same dropout masks";
  }
  const TrainSummary one = solo_on_rank0(options(dir, "split", 10, extra, nullptr));
  if (world().rank() == 0) {
    EXPECT_EQ(one.steps, 10);
    EXPECT_EQ(one.steps_this_run, 2);
    EXPECT_FALSE(one.failed);
  }
}

TEST(DataParallel, ZeroOneTrainsLikePlainDataParallelAndItsCheckpointsAreFull) {
  const std::string dir = shared_corpus("zero1");
  const std::vector<std::string> zero = {"training.shard_optimizer=true", "model.dropout=0"};
  train(options(dir, "plain", 6, {"model.dropout=0"}, &world()));
  train(options(dir, "zero", 6, zero, &world()));
  if (world().rank() == 0) {
    // The same elementwise AdamW on the same summed gradients; only the clip norm is summed in
    // another order (double), which may move the clip factor in its last bit.
    EXPECT_LT(compare(dir + "/plain", dir + "/zero", 6, "model.safetensors").relative_l2, 1e-6);
    EXPECT_LT(compare(dir + "/plain", dir + "/zero", 6, "optimizer.safetensors").relative_l2, 1e-5)
        << "the gathered optimizer state is not the full one";
  }
  // A ZeRO-1 checkpoint holds the full state: two ranks resume it exactly, one rank continues.
  train(options(dir, "zero_split", 4, zero, &world()));
  train(options(dir, "zero_split", 6, zero, &world()));
  if (world().rank() == 0) {
    EXPECT_EQ(compare(dir + "/zero", dir + "/zero_split", 6, "model.safetensors").bitwise_differ, 0u);
  }
  const TrainSummary one = solo_on_rank0(options(dir, "zero", 8, zero, nullptr));
  if (world().rank() == 0) {
    EXPECT_EQ(one.steps_this_run, 2);
  }
}

TEST(DataParallel, ZeroOneHoldsAShareOfTheOptimizerStatePerRank) {
  // Measured by the allocator: the bytes an optimizer takes when it is built.
  std::vector<Tensor> params;
  for (int64_t n : {1000, 37, 4096, 5}) params.push_back(Tensor::ones(Shape{n}));
  std::vector<std::pair<std::string, Tensor*>> named;
  for (size_t i = 0; i < params.size(); ++i) named.push_back({"p" + std::to_string(i) + ".weight", &params[i]});
  const int64_t before = memory_stats().current_bytes;
  int64_t plain_bytes, sharded_bytes;
  {
    AdamW plain(named, {});
    plain_bytes = memory_stats().current_bytes - before;
  }
  const int64_t before_sharded = memory_stats().current_bytes;
  ShardedAdamW sharded(named, {}, world());
  // Its flat buffers (gradients in, parameters out, and this rank's gradient shard) are the
  // price of one collective per step; the moments are what ZeRO-1 shards.
  const int64_t moments = 2 * 4 * sharded.shard_elements();
  sharded_bytes = memory_stats().current_bytes - before_sharded;
  EXPECT_EQ(sharded.shard_elements(), (5138 + world().world() - 1) / world().world());
  EXPECT_GE(plain_bytes, 2 * 4 * 5138);
  EXPECT_LE(moments * world().world(), plain_bytes + 2 * 4 * world().world());
  EXPECT_GT(sharded_bytes, moments);
}

TEST(DataParallel, NonFiniteStepsAreSkippedAndStopEveryRankTogether) {
  const std::string dir = shared_corpus("nonfinite");
  train(options(dir, "run", 3, {}, &world()));
  // An absurd learning rate blows the weights up; the skips and the stop are agreed, so no
  // rank is left waiting in a collective the others never call.
  const TrainSummary r = train(options(dir, "run", 60,
                                       {"optimizer.lr=1e30", "optimizer.clip_norm=0", "training.max_bad_steps=2",
                                        "optimizer.schedule=constant"},
                                       &world()));
  EXPECT_TRUE(r.failed);
  EXPECT_EQ(r.stop_reason, "non-finite");
  double steps = static_cast<double>(r.steps), low = steps;
  world().all_reduce_host(&steps, 1, kernels::ReduceOp::max);
  world().all_reduce_host(&low, 1, kernels::ReduceOp::min);
  EXPECT_EQ(steps, low) << "the ranks stopped after different steps";
}

TEST(DataParallel, DriftedReplicasAreAnErrorNamingTheRanksAndABroadcastRealignsThem) {
  Tensor a = Tensor::full(Shape{1000}, 1.0f), b = Tensor::full(Shape{7}, 3.0f);
  if (world().rank() == 1) b.data<float>()[6] = std::nextafter(3.0f, 4.0f);  // one bit on one rank
  const std::vector<Tensor*> replica = {&a, &b};
  try {
    check_replicas_identical(replica, world(), "in this test");
    ADD_FAILURE() << "a one-bit difference on rank 1 went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 differ from rank 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in this test"), std::string::npos) << e.what();
  }
  broadcast_tensors(replica, world(), 0);
  EXPECT_NO_THROW(check_replicas_identical(replica, world(), "after the broadcast"));
  EXPECT_EQ(b.data<float>()[6], 3.0f);
}

// TrainStep itself on two ranks on the emulated device (issue 51): the tiny BART, each rank its
// own batch. Deferred, a step's records are agreed on the device (an all-gather of each rank's
// record, added in rank order where it lands), so a step that does not log makes the host wait
// for nothing; settle() reads the agreed records once per rank. Immediate, each micro-batch's
// loss and NLL and the update's outcome are read back (2 x 2 + 1 a step). Both give the same
// results and parameters bit for bit: the records' sums are the host all-reduce's (rank order,
// double), the gradients the same buckets'.
namespace step_on_two_ranks {

constexpr int64_t kMicroBatches = 2;
enum class ShardOptimizer { no, yes };

struct RankRun {
  BartForConditionalGeneration model;
  std::unique_ptr<TrainStep> step;
  Shape src_shape{2, 7}, tgt_shape{2, 5};
  std::vector<int32_t> src, tgt_in, labels;
  PaddingMask pad = PaddingMask(14, 0);

  RankRun(TrainStepOptions::Defer defer, ShardOptimizer shard)
      : model(tarn::testing::config_for(tarn::testing::attention_setups()[1]), 11) {
    model.to(tarn::testing::emulated_cuda());
    const uint64_t seed = 10 * static_cast<uint64_t>(world().rank());  // each rank its own rows
    src = tarn::testing::random_ids(14, 48, seed + 3);
    tgt_in = tarn::testing::random_ids(10, 48, seed + 4);
    labels = tarn::testing::random_ids(10, 48, seed + 5);
    pad[12] = pad[13] = 1;
    TrainStepOptions o;
    o.clip_norm = 0.5f;
    o.defer_results = defer;
    o.shard_optimizer = shard == ShardOptimizer::yes;
    step = std::make_unique<TrainStep>(model, world(), world(), o);
  }
  std::optional<MicroBatchLoss> forward(int64_t, bool nan) {
    MicroBatchLoss m;
    m.loss = seq2seq_loss(model.forward(src, src_shape, pad, tgt_in, tgt_shape), labels, model.config().pad_token_id,
                          0.0f, &m.counted, nullptr, CrossEntropyOptions{}.ignore_index, &m.totals);
    if (nan) m.loss = mul(m.loss, Tensor::full(Shape{}, NAN, m.loss.device()));
    m.tokens = 24;
    return m;
  }
  // `nan_on_rank`: that rank's second micro-batch has a NaN loss (-1: none).
  StepResult run(int nan_on_rank = -1) {
    return step->run(kMicroBatches, world().world() * kMicroBatches * 10,
                     [&](int64_t k) { return forward(k, k == 1 && world().rank() == nan_on_rank); }, 1e-3f);
  }
  std::vector<std::vector<float>> parameters() const {
    std::vector<std::vector<float>> out;
    for (const auto& [name, p] : model.named_parameters()) out.push_back(p->to_vector());
    return out;
  }
};

emu::HostWaits waits_of(const std::function<void()>& f) {
  emu::reset_host_waits();
  f();
  return emu::host_waits();
}

void expect_deferred_equals_immediate(ShardOptimizer shard) {
  RankRun deferred(TrainStepOptions::Defer::automatic, shard), immediate(TrainStepOptions::Defer::no, shard);
  ASSERT_TRUE(deferred.step->defers()) << "a CUDA device defers on several ranks too";
  std::vector<StepResult> at_once;
  for (int s = 0; s < 4; ++s) {
    const int nan_on_rank = s == 2 ? 1 : -1;  // step 2: one rank's loss is NaN, every rank skips
    StepResult r;
    const emu::HostWaits d = waits_of([&] { r = deferred.run(nan_on_rank); });
    EXPECT_TRUE(r.pending());
    if (s > 0) {  // the first step also uploads the optimizer's table of ranges (once)
      EXPECT_EQ(d.copies_to_host, 0u) << "deferred step " << s;
      EXPECT_EQ(d.synchronizations, 0u) << "deferred step " << s;
    }
    const emu::HostWaits i = waits_of([&] { at_once.push_back(immediate.run(nan_on_rank)); });
    if (s == 1) {
      const auto n = [](uint64_t v) { return static_cast<unsigned long long>(v); };
      std::printf("[rank %d] host waits per step on %d ranks: deferred %llu copies to host, %llu syncs; immediate "
                  "%llu copies to host, %llu syncs\n",
                  world().rank(), world().world(), n(d.copies_to_host), n(d.synchronizations), n(i.copies_to_host),
                  n(i.synchronizations));
    }
  }
  std::vector<StepResult> later;
  const emu::HostWaits w = waits_of([&] { later = deferred.step->settle(); });
  EXPECT_EQ(w.copies_to_host, 1u) << "every pending step's agreed record in one copy";
  ASSERT_EQ(later.size(), at_once.size());
  for (size_t i = 0; i < later.size(); ++i) {
    EXPECT_EQ(later[i].outcome, at_once[i].outcome) << "step " << i;
    EXPECT_EQ(later[i].grad_norm, at_once[i].grad_norm) << "step " << i;
    // An immediate step stops its forwards at a bad loss, a deferred one runs them all: the
    // counts and sums of a bad step mean nothing either way.
    if (!at_once[i].applied()) continue;
    EXPECT_EQ(later[i].tokens, at_once[i].tokens) << "step " << i;
    EXPECT_EQ(later[i].loss_sum, at_once[i].loss_sum) << "step " << i;
    EXPECT_EQ(later[i].nll_sum, at_once[i].nll_sum) << "step " << i;
  }
  EXPECT_EQ(at_once[2].outcome, StepOutcome::nonfinite_loss);
  EXPECT_EQ(at_once[3].outcome, StepOutcome::applied);
  const auto a = deferred.parameters(), b = immediate.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0) << "parameter " << i;
}

TEST(DataParallel, ADeferredStepOnTwoRanksOfTheEmulatedDeviceWaitsForNothingAndEqualsTheImmediateOne) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the emulated CUDA device under AddressSanitizer takes minutes per step";
#endif
  expect_deferred_equals_immediate(ShardOptimizer::no);
}

// ZeRO-1 too: the shard's sum of squares, the ranks' sums and the shard's update stay on the
// device (ShardedAdamW::step), so a deferred step reads nothing back either; immediate, it reads
// each micro-batch's loss and NLL and the update's outcome (as before: the losses and the norm).
TEST(DataParallel, ADeferredZeroOneStepOnTwoRanksOfTheEmulatedDeviceWaitsForNothingAndEqualsTheImmediateOne) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the emulated CUDA device under AddressSanitizer takes minutes per step";
#endif
  expect_deferred_equals_immediate(ShardOptimizer::yes);
}

}  // namespace step_on_two_ranks

TEST(DataParallel, ShardedValidationGivesTheOneRankPerplexity) {
  const std::string dir = shared_corpus("eval");
  train(options(dir, "run", 3, {}, &world()));
  const Checkpoint c = open_checkpoint(checkpoint_dir(dir + "/run", 3));
  const Recipe recipe = checkpoint_recipe(c);
  const Tokenizer tok = open_tokenizer(recipe);
  BartForConditionalGeneration model(model_config(recipe, tok.vocab_size()));
  load_model_weights(c, model);
  const auto data = open_dataset(recipe, tok, dir + "/valid.txt", kEvalNoiseSeed, "valid");
  for (int64_t max_batches : {0, 1, 3}) {
    const EvalResult sharded = evaluate(model, *data, 256, max_batches, &world());
    const EvalResult whole = evaluate(model, *data, 256, max_batches, nullptr);
    EXPECT_EQ(sharded.tokens, whole.tokens) << max_batches;
    EXPECT_EQ(sharded.batches, whole.batches) << max_batches;
    EXPECT_NEAR(sharded.perplexity(), whole.perplexity(), 1e-9 * whole.perplexity()) << max_batches;
  }
}

}  // namespace
}  // namespace tarn::app

// MPI must outlive every test: finalised after RUN_ALL_TESTS.
int main(int argc, char** argv) {
  tarn::kernels::restart_with_better_blas_kernels(argv);  // tests/gtest_main.cpp says why
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  tarn::kernels::mpi::finalize();
  return result;
}
