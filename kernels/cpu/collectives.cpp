// Collectives among ranks that are threads of one process (kernels/collectives.h). Each call
// is a few phases separated by barriers: every rank posts its buffer; every rank computes its
// own slice of the result from all buffers (reads only); every rank writes its slice into
// every buffer. Element i is always reduced in rank order (kernels/cpu/rank_order.h), whatever
// the slicing or timing, so the result is bit-reproducible.
#include "kernels/collectives.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "kernels/check.h"
#include "kernels/cpu/rank_order.h"

namespace tarn::kernels::cpu {
namespace {

// What one rank passed to a call, as every rank of the group sees it after the post.
struct Post {
  const char* op = "";  // the collective's name (a string literal)
  void* buffer = nullptr;
  int64_t n = 0;
  int root = 0;
  int reduce = 0;  // all_reduce_host's ReduceOp
};

// What the ranks of one group share.
class Group {
 public:
  explicit Group(int world) : world_(world), posts_(world) {}

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

  // Phase 1 of every call: post what this rank passed, wait for all, and check that the ranks
  // agree. Every rank sees the same posts and so throws the same error, after a second barrier
  // that keeps the posts alive until all have read them.
  void post(int rank, const Post& mine) {
    posts_[rank] = mine;
    barrier();
    std::string problem;
    const Post& first = posts_[0];
    for (int r = 0; r < world_ && problem.empty(); ++r) {
      const Post& p = posts_[r];
      if (std::strcmp(p.op, first.op) != 0)
        problem = str_cat("collective mismatch: rank ", r, " called ", p.op, " but rank 0 called ", first.op);
      else if (p.n != first.n)
        problem = str_cat(p.op, ": rank ", r, " passed n = ", p.n, " but rank 0 passed ", first.n);
      else if (p.root != first.root)
        problem = str_cat(p.op, ": rank ", r, " passed root ", p.root, " but rank 0 passed ", first.root);
      else if (p.reduce != first.reduce)
        problem = str_cat(p.op, ": rank ", r, " passed op ", reduce_op_name(static_cast<ReduceOp>(p.reduce)),
                          " but rank 0 passed ", reduce_op_name(static_cast<ReduceOp>(first.reduce)));
      else if (p.n > 0 && p.buffer == nullptr)
        problem = str_cat(p.op, ": rank ", r, " passed a null buffer for ", p.n, " values");
    }
    if (problem.empty() && (first.root < 0 || first.root >= world_))
      problem = str_cat(first.op, ": root ", first.root, " is not a rank of a group of ", world_);
    if (!problem.empty()) {
      barrier();
      throw Error(problem);
    }
  }

  template <typename T>
  T* buffer(int rank) const {
    return static_cast<T*>(posts_[rank].buffer);
  }

 private:
  const int world_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<Post> posts_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world() const override { return group_->world(); }
  const char* backend() const override { return "cpu-threads"; }

  void all_reduce_sum(float* data, int64_t n) override {
    check_length("all_reduce_sum", n);
    group_->post(rank_, {"all_reduce_sum", data, n, 0, 0});
    all_reduce(data, n, ReduceOp::sum, float_slice_);
  }

  void reduce_scatter_sum(const float* send, float* recv, int64_t n) override {
    check_length("reduce_scatter_sum", n);
    TARN_ASSERT(n == 0 || recv != nullptr, "reduce_scatter_sum: null recv buffer for ", n, " values on rank ", rank_);
    // send is only read (the post's buffer is mutable for the calls that write every rank's).
    group_->post(rank_, {"reduce_scatter_sum", const_cast<float*>(send), n, 0, 0});
    // My slice of every rank's send, in rank order. Only I read slice rank_ of any buffer, so
    // writing recv == send + rank_ * n in place is safe; still, sum into scratch first so
    // that recv may be any buffer that the others do not read.
    const int64_t offset = n * rank_;
    float_slice_.resize(static_cast<size_t>(n));
    reduce_in_rank_order(float_slice_.data(), n, world(),
                         [&](int r) { return group_->buffer<const float>(r) + offset; }, ReduceOp::sum);
    if (n > 0) std::memcpy(recv, float_slice_.data(), static_cast<size_t>(n) * sizeof(float));
    group_->barrier();  // every rank has read every send buffer
  }

  void all_gather(const float* send, float* recv, int64_t n) override {
    check_length("all_gather", n);
    TARN_ASSERT(n == 0 || recv != nullptr, "all_gather: null recv buffer for ", n, " values on rank ", rank_);
    group_->post(rank_, {"all_gather", const_cast<float*>(send), n, 0, 0});
    // Others read only my send; in place, that is my recv's own slot, which I skip.
    for (int r = 0; r < world() && n > 0; ++r) {
      float* dst = recv + static_cast<int64_t>(r) * n;
      const float* src = group_->buffer<const float>(r);
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    }
    group_->barrier();  // every rank has read every send buffer
  }

  void broadcast(float* data, int64_t n, int root) override {
    check_length("broadcast", n);
    group_->post(rank_, {"broadcast", data, n, root, 0});
    if (rank_ != root && n > 0) std::memcpy(data, group_->buffer<float>(root), static_cast<size_t>(n) * sizeof(float));
    group_->barrier();  // the root's buffer is no longer read
  }

  void all_reduce_host(double* data, int64_t n, ReduceOp op) override {
    check_length("all_reduce_host", n);
    group_->post(rank_, {"all_reduce_host", data, n, 0, static_cast<int>(op)});
    all_reduce(data, n, op, double_slice_);
  }

  void broadcast_host_bytes(void* data, int64_t bytes, int root) override {
    check_length("broadcast_host_bytes", bytes);
    group_->post(rank_, {"broadcast_host_bytes", data, bytes, root, 0});
    if (rank_ != root && bytes > 0) std::memcpy(data, group_->buffer<const char>(root), static_cast<size_t>(bytes));
    group_->barrier();  // the root's buffer is no longer read
  }

  void barrier() override { group_->barrier(); }

 private:
  void check_length(const char* op, int64_t n) const {
    TARN_ASSERT(n >= 0, op, ": negative length ", n, " on rank ", rank_);
  }

  // After the post: my slice [n*rank/world, n*(rank+1)/world) reduced from every buffer in rank
  // order into scratch (nobody writes a buffer yet), then written into every rank's buffer.
  template <typename T>
  void all_reduce(T* data, int64_t n, ReduceOp op, std::vector<T>& slice) {
    const int world = group_->world();
    const int64_t begin = n * rank_ / world, end = n * (rank_ + 1) / world;
    slice.resize(static_cast<size_t>(end - begin));
    reduce_in_rank_order(slice.data(), end - begin, world, [&](int r) { return group_->buffer<const T>(r) + begin; },
                         op);
    group_->barrier();  // every rank has read every buffer
    for (int r = 0; r < world && end > begin; ++r)
      std::memcpy(group_->buffer<T>(r) + begin, slice.data(), slice.size() * sizeof(T));
    group_->barrier();  // every slice is in every buffer
  }

  std::shared_ptr<Group> group_;
  int rank_;
  std::vector<float> float_slice_;
  std::vector<double> double_slice_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> thread_communicators(int world) {
  TARN_ASSERT(world >= 1, "thread_communicators: world must be at least 1, got ", world);
  auto group = std::make_shared<Group>(world);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

}  // namespace tarn::kernels::cpu
