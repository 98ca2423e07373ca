// Collectives among ranks that are threads of one process (kernels/collectives.h). Each call
// is a few phases separated by barriers: every rank posts its buffer; every rank computes its
// own slice of the result from all buffers (reads only); every rank writes its slice into
// every buffer. Element i is always summed in rank order, whatever the slicing or timing, so
// the result is bit-reproducible.
#include "kernels/collectives.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "kernels/check.h"

namespace tarn::kernels::cpu {
namespace {

// What the ranks of one group share.
class Group {
 public:
  explicit Group(int world) : world_(world), buffers_(world), lengths_(world), roots_(world) {}

  int world() const { return world_; }

  // Returns once all `world` ranks have arrived (generation counting, so it is reusable).
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

  // Phase 1 of every call: post (buffer, n, root), wait for all, and check that the ranks
  // agree. Every rank sees the same posts and so throws the same error, after a second barrier
  // that keeps the posts alive until all have read them.
  void post(const char* op, int rank, float* buffer, int64_t n, int root) {
    buffers_[rank] = buffer;
    lengths_[rank] = n;
    roots_[rank] = root;
    barrier();
    std::string problem;
    for (int r = 0; r < world_ && problem.empty(); ++r) {
      if (lengths_[r] != lengths_[0])
        problem = str_cat(op, ": rank ", r, " passed n = ", lengths_[r], " but rank 0 passed ", lengths_[0]);
      else if (roots_[r] != roots_[0])
        problem = str_cat(op, ": rank ", r, " passed root ", roots_[r], " but rank 0 passed ", roots_[0]);
      else if (lengths_[r] > 0 && buffers_[r] == nullptr)
        problem = str_cat(op, ": rank ", r, " passed a null buffer for ", lengths_[r], " values");
    }
    if (problem.empty() && (roots_[0] < 0 || roots_[0] >= world_))
      problem = str_cat(op, ": root ", roots_[0], " is not a rank of a group of ", world_);
    if (!problem.empty()) {
      barrier();
      throw Error(problem);
    }
  }

  float* buffer(int rank) const { return buffers_[rank]; }

 private:
  const int world_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<float*> buffers_;
  std::vector<int64_t> lengths_;
  std::vector<int> roots_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world() const override { return group_->world(); }
  const char* backend() const override { return "cpu-threads"; }

  void all_reduce_sum(float* data, int64_t n) override {
    TARN_CHECK(n >= 0, "all_reduce_sum: negative length ", n, " on rank ", rank_);
    group_->post("all_reduce_sum", rank_, data, n, 0);
    const int world = group_->world();
    const int64_t begin = n * rank_ / world, end = n * (rank_ + 1) / world;
    // My slice, summed in rank order into my own scratch (nobody writes a buffer yet).
    slice_.assign(static_cast<size_t>(end - begin), 0.0f);
    if (end > begin) {
      std::memcpy(slice_.data(), group_->buffer(0) + begin, slice_.size() * sizeof(float));
      for (int r = 1; r < world; ++r) {
        const float* src = group_->buffer(r) + begin;
        for (int64_t i = 0; i < end - begin; ++i) slice_[i] += src[i];
      }
    }
    group_->barrier();  // every rank has read every buffer
    for (int r = 0; r < world && end > begin; ++r)
      std::memcpy(group_->buffer(r) + begin, slice_.data(), slice_.size() * sizeof(float));
    group_->barrier();  // every slice is in every buffer
  }

  void broadcast(float* data, int64_t n, int root) override {
    TARN_CHECK(n >= 0, "broadcast: negative length ", n, " on rank ", rank_);
    group_->post("broadcast", rank_, data, n, root);
    if (rank_ != root && n > 0) std::memcpy(data, group_->buffer(root), static_cast<size_t>(n) * sizeof(float));
    group_->barrier();  // the root's buffer is no longer read
  }

  void barrier() override { group_->barrier(); }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
  std::vector<float> slice_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> thread_communicators(int world) {
  TARN_CHECK(world >= 1, "thread_communicators: world must be at least 1, got ", world);
  auto group = std::make_shared<Group>(world);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

}  // namespace tarn::kernels::cpu
