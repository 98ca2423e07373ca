#include "framework/distributed/gradient_sync.h"

#include <chrono>

namespace tarn {
namespace {

using Clock = std::chrono::steady_clock;

// Adds the time from construction to destruction to `total`.
class Timed {
 public:
  explicit Timed(double& total) : total_(total) {}
  ~Timed() { total_ += std::chrono::duration<double>(Clock::now() - start_).count(); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& total_;
  Clock::time_point start_ = Clock::now();
};

}  // namespace

GradientSync::GradientSync(std::vector<Tensor*> params, kernels::Communicator& comm, int64_t bucket_bytes)
    : GradientSync(std::make_unique<ParameterArena>(params, params.empty() ? Device::cpu() : params.front()->device()),
                   params, comm, bucket_bytes) {}

GradientSync::GradientSync(std::unique_ptr<ParameterArena> owned, std::vector<Tensor*> params,
                           kernels::Communicator& comm, int64_t bucket_bytes)
    : GradientSync(*owned, std::move(params), comm, bucket_bytes) {
  owned_ = std::move(owned);
}

GradientSync::GradientSync(const ParameterArena& arena, std::vector<Tensor*> params, kernels::Communicator& comm,
                           int64_t bucket_bytes)
    : arena_(arena), params_(std::move(params)), comm_(comm) {
  TARN_ASSERT(bucket_bytes >= 4, "GradientSync: bucket_bytes must be at least 4, got ", bucket_bytes);
  const int64_t bucket_elements = bucket_bytes / 4;
  range_of_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t r = arena_.range_of(*params_[i]);
    TARN_ASSERT(r >= 0, "GradientSync: parameter ", i, " (", params_[i]->str(0), ") is not in the arena");
    range_of_[i] = static_cast<size_t>(r);
    if (params_[i]->meta()) range_by_meta_[params_[i]->meta().get()] = range_of_[i];
  }
  // The parameters listed last first: the backward makes the last layers' gradients final
  // first. A bucket grows down over adjacent ranges and closes once it spans bucket_elements,
  // or where the next range is not the one below it (a tied parameter listed again).
  const auto& ranges = arena_.ranges();
  bucket_of_.assign(ranges.size(), 0);
  std::vector<bool> seen(ranges.size(), false);
  bool open = false;
  size_t lowest = 0;  // the open bucket's lowest range
  for (size_t i = params_.size(); i-- > 0;) {
    const size_t r = range_of_[i];
    if (seen[r]) continue;
    seen[r] = true;
    order_.push_back(r);
    if (open && r + 1 != lowest) open = false;
    if (!open) {
      buckets_.push_back({ranges[r].offset, ranges[r].end(), 0});
      open = true;
    }
    Bucket& b = buckets_.back();
    b.begin = ranges[r].offset;
    ++b.ranges;
    lowest = r;
    bucket_of_[r] = buckets_.size() - 1;
    if (b.end - b.begin >= bucket_elements) open = false;
  }
  if (buckets_.empty()) buckets_.push_back({});
  reset_step();
}

void GradientSync::reset_step() {
  packed_.assign(arena_.ranges().size(), false);
  bucket_packed_.assign(buckets_.size(), 0);
  pending_.clear();
  first_incomplete_ = 0;
  started_early_ = 0;
  comm_s_ = 0;
}

std::vector<double> GradientSync::local_grad_mask() const {
  std::vector<double> mask(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) mask[i] = params_[i]->grad().defined() ? 1.0 : 0.0;
  return mask;
}

// Range r's gradient is final: settled into the arena (nothing to move when autograd made it
// there; zeros when this rank has none), it may join its bucket's all-reduce.
void GradientSync::pack(size_t r) {
  if (packed_[r]) return;
  packed_[r] = true;
  ++bucket_packed_[bucket_of_[r]];
  if (comm_.world() > 1) arena_.settle_grad(r);
}

// Starts, in order, every bucket whose gradients are all packed, up to the first that is not.
void GradientSync::start_ready_buckets() {
  if (comm_.world() == 1 || params_.empty()) return;
  while (pending_.size() < buckets_.size() && bucket_packed_[pending_.size()] == buckets_[pending_.size()].ranges) {
    const Bucket& b = buckets_[pending_.size()];
    Timed timed(comm_s_);
    pending_.push_back(
        comm_.start_all_reduce_sum(arena_.grads().narrow0(b.begin, b.end).device_f32(), b.end - b.begin));
  }
}

void GradientSync::leaf_ready(const AutogradMeta& leaf) {
  const auto it = range_by_meta_.find(&leaf);
  if (it == range_by_meta_.end()) return;  // not one of ours (an input that required a gradient)
  pack(it->second);
  const size_t before = pending_.size();
  start_ready_buckets();
  started_early_ += static_cast<int64_t>(pending_.size() - before);
}

// Lets the oldest started bucket move on (MPI progresses only inside its calls).
void GradientSync::node_done() {
  if (first_incomplete_ >= pending_.size()) return;
  Timed timed(comm_s_);
  while (first_incomplete_ < pending_.size() && pending_[first_incomplete_]->test()) ++first_incomplete_;
}

void GradientSync::start_remaining() {
  for (size_t r : order_) pack(r);
  start_ready_buckets();
}

void GradientSync::finish(const std::vector<double>& any_rank_has_grad) {
  TARN_ASSERT(any_rank_has_grad.size() == params_.size(), "GradientSync: a mask of ", any_rank_has_grad.size(),
              " values for ", params_.size(), " parameters");
  if (comm_.world() == 1 || params_.empty()) {
    last_comm_s_ = 0;
    last_started_early_ = 0;
    reset_step();
    return;
  }
  start_remaining();
  {
    Timed timed(comm_s_);
    for (auto& p : pending_) p->wait();
  }
  // The sums are in the arena already: a parameter some rank had a gradient for takes its range.
  for (size_t i = 0; i < params_.size(); ++i)
    if (any_rank_has_grad[i] != 0.0) arena_.adopt_grad(range_of_[i]);
  last_comm_s_ = comm_s_;
  last_started_early_ = started_early_;
  reset_step();
}

}  // namespace tarn
