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

void pack_gradient(const Tensor& param, Tensor dst) {
  const Tensor g = param.grad();
  if (g.defined())
    dst.copy_from(g);
  else
    dst.fill(0.0f);
}

GradientSync::GradientSync(std::vector<Tensor*> params, kernels::Communicator& comm, int64_t bucket_bytes)
    : params_(std::move(params)), comm_(comm) {
  TARN_ASSERT(bucket_bytes >= 4, "GradientSync: bucket_bytes must be at least 4, got ", bucket_bytes);
  const int64_t bucket_elements = bucket_bytes / 4;
  offsets_.resize(params_.size());
  bucket_of_.resize(params_.size());
  int64_t in_bucket = 0, in_bucket_params = 0;
  // Last parameter first: the backward makes the last layers' gradients final first.
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor* p = params_[k];
    TARN_ASSERT(p->dtype() == DType::f32, "GradientSync: parameters must be f32");
    TARN_ASSERT(p->device() == params_.front()->device(), "GradientSync: parameters on ", p->device().str(), " and ",
                params_.front()->device().str());
    if (p->meta()) by_meta_[p->meta().get()].push_back(k);
    offsets_[k] = total_;
    bucket_of_[k] = bucket_ends_.size();
    total_ += p->numel();
    in_bucket += p->numel();
    ++in_bucket_params;
    if (in_bucket >= bucket_elements) {
      bucket_ends_.push_back(total_);
      bucket_size_.push_back(in_bucket_params);
      in_bucket = in_bucket_params = 0;
    }
  }
  if (in_bucket_params > 0 || bucket_ends_.empty()) {
    bucket_ends_.push_back(total_);
    bucket_size_.push_back(in_bucket_params);
  }
  if (!params_.empty()) flat_ = Tensor::zeros(Shape{total_}, params_.front()->device());
  reset_step();
}

void GradientSync::reset_step() {
  packed_.assign(params_.size(), false);
  bucket_packed_.assign(bucket_ends_.size(), 0);
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

void GradientSync::pack(size_t i) {
  if (packed_[i]) return;
  packed_[i] = true;
  ++bucket_packed_[bucket_of_[i]];
  if (comm_.world() > 1) pack_gradient(*params_[i], flat_.narrow0(offsets_[i], offsets_[i] + params_[i]->numel()));
}

// Starts, in order, every bucket whose gradients are all packed, up to the first that is not.
void GradientSync::start_ready_buckets() {
  if (comm_.world() == 1 || params_.empty()) return;
  while (pending_.size() < bucket_ends_.size() && bucket_packed_[pending_.size()] == bucket_size_[pending_.size()]) {
    const size_t b = pending_.size();
    const int64_t begin = b == 0 ? 0 : bucket_ends_[b - 1];
    Timed timed(comm_s_);
    pending_.push_back(comm_.start_all_reduce_sum(flat_.narrow0(begin, bucket_ends_[b]).device_f32(),
                                                  bucket_ends_[b] - begin));
  }
}

void GradientSync::leaf_ready(const AutogradMeta& leaf) {
  const auto it = by_meta_.find(&leaf);
  if (it == by_meta_.end()) return;  // not one of ours (an input that required a gradient)
  for (size_t i : it->second) pack(i);
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
  for (size_t i = params_.size(); i-- > 0;) pack(i);
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
  for (size_t i = 0; i < params_.size(); ++i) {
    if (any_rank_has_grad[i] == 0.0) continue;
    const Tensor slot = flat_.narrow0(offsets_[i], offsets_[i] + params_[i]->numel()).view(params_[i]->shape());
    Tensor g = params_[i]->grad();
    if (!g.defined()) {
      g = Tensor::empty(params_[i]->shape(), params_[i]->device());
      params_[i]->set_grad(g);
    }
    g.copy_from(slot);  // aliased gradients (framework/optim/clip_grad.h) get the same sum twice
  }
  last_comm_s_ = comm_s_;
  last_started_early_ = started_early_;
  reset_step();
}

}  // namespace tarn
