// The overlapped gradient all-reduce on the (emulated) CUDA device, with collectives that
// complete late. GradientSync polls each started bucket after every backward node; on a device
// the poll is cudaEventQuery, whose cudaErrorNotReady stays as the thread's last error unless
// the poller clears it, and the next kernel's launch check then throws it as its own failure.
// Here the emulated device keeps each recorded event in flight for a few queries
// (emu::set_completion_polls), so a poll that forgets to clear fails this test, as it would fail
// the first multi-GPU backward on hardware.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "framework/autograd.h"
#include "framework/distributed/gradient_sync.h"
#include "framework/ops/elementwise.h"
#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "kernels/cuda_kernels.h"
#include "kernels/emu/emu.h"
#include "tests/common/gradcheck.h"
#include "tests/cuda_model/emulated_cuda.h"

namespace tarn {
namespace {

using testing::emulated_cuda;
using testing::random_tensor;

// Restores the emulator's completion model after the test.
class CompletionPollsScope {
 public:
  explicit CompletionPollsScope(int polls) : saved_(emu::completion_polls()) { emu::set_completion_polls(polls); }
  ~CompletionPollsScope() { emu::set_completion_polls(saved_); }
  CompletionPollsScope(const CompletionPollsScope&) = delete;
  CompletionPollsScope& operator=(const CompletionPollsScope&) = delete;

 private:
  int saved_;
};

// A few layers, so that the backward has many nodes, each followed by a poll, and several
// buckets start before it ends.
struct Replica {
  std::vector<Tensor> weights;
  explicit Replica(const Device& device) {
    for (int i = 0; i < 4; ++i)
      weights.push_back(random_tensor(Shape{16, 16}, 40 + i).to(device).set_requires_grad(true));
  }
  std::vector<Tensor*> params() {
    std::vector<Tensor*> out;
    for (Tensor& w : weights) out.push_back(&w);
    return out;
  }
  Tensor loss(int rank, const Device& device) const {
    Tensor h = random_tensor(Shape{8, 16}, 10 + static_cast<uint64_t>(rank)).to(device);
    for (const Tensor& w : weights) h = tanh(matmul(h, w));
    return sum_all(mul(h, h));
  }
};

// Each rank's summed gradients after one overlapped step, as host vectors.
std::vector<std::vector<std::vector<float>>> overlapped_step(int64_t bucket_bytes) {
  const Device device = emulated_cuda();
  const auto comms = kernels::cuda_emu::local_communicators(2);
  std::vector<std::vector<std::vector<float>>> grads(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        Replica m(device);
        GradientSync sync(m.params(), *comms[r], bucket_bytes);
        const Tensor loss = m.loss(r, device);
        {
          ObserveBackward observe(sync);
          loss.backward();
        }
        sync.start_remaining();
        sync.finish(std::vector<double>(m.params().size(), 1.0));
        for (Tensor* p : m.params()) grads[r].push_back(p->grad().to_vector());
      } catch (const std::exception& e) {
        // Both ranks run the same graph and buckets, so a failed poll fails both at the same
        // launch, and neither is left waiting in a collective.
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return grads;
}

TEST(GradientSyncOnCuda, CollectivesThatCompleteLateDoNotFailTheNextLaunch) {
  emulated_cuda();  // installs the emulated backend where there is no GPU
  if (&kernels::cuda_backend() != &kernels::cuda_emu::backend())
    GTEST_SKIP() << "the real CUDA backend: late completion is the emulator's to arrange (NcclCollectives "
                    "runs the overlapped path on two GPUs)";
  std::vector<std::vector<std::vector<float>>> done_at_once, late;
  {
    CompletionPollsScope at_once(0);
    done_at_once = overlapped_step(64 * 4);
  }
  {
    CompletionPollsScope in_flight(3);  // every bucket's event answers "not ready" three times
    late = overlapped_step(64 * 4);
  }
  ASSERT_EQ(late.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(late[r].size(), done_at_once[r].size()) << "rank " << r;
    for (size_t i = 0; i < late[r].size(); ++i) {
      ASSERT_EQ(late[r][i].size(), done_at_once[r][i].size());
      EXPECT_EQ(std::memcmp(late[r][i].data(), done_at_once[r][i].data(), late[r][i].size() * sizeof(float)), 0)
          << "rank " << r << ", parameter " << i;
    }
  }
  // Both ranks hold the same sums.
  for (size_t i = 0; i < late[0].size(); ++i) EXPECT_EQ(late[0][i], late[1][i]) << "parameter " << i;
}

}  // namespace
}  // namespace tarn
