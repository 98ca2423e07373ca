#include "framework/distributed/gradient_sync.h"

#include <chrono>

namespace tarn {

void pack_gradient(const Tensor& param, Tensor dst) {
  const Tensor g = param.grad();
  if (g.defined())
    dst.copy_from(g);
  else
    dst.fill(0.0f);
}

GradientSync::GradientSync(std::vector<Tensor*> params, kernels::Communicator& comm, int64_t bucket_bytes)
    : params_(std::move(params)), comm_(comm) {
  TARN_CHECK(bucket_bytes >= 4, "GradientSync: bucket_bytes must be at least 4, got ", bucket_bytes);
  const int64_t bucket_elements = bucket_bytes / 4;
  int64_t in_bucket = 0;
  for (const Tensor* p : params_) {
    TARN_CHECK(p->dtype() == DType::f32, "GradientSync: parameters must be f32");
    TARN_CHECK(p->device() == params_.front()->device(), "GradientSync: parameters on ", p->device().str(), " and ",
               params_.front()->device().str());
    offsets_.push_back(total_);
    total_ += p->numel();
    in_bucket += p->numel();
    if (in_bucket >= bucket_elements) {
      bucket_ends_.push_back(total_);
      in_bucket = 0;
    }
  }
  if (in_bucket > 0 || bucket_ends_.empty()) bucket_ends_.push_back(total_);
  if (!params_.empty()) flat_ = Tensor::zeros(Shape{total_}, params_.front()->device());
}

std::vector<double> GradientSync::local_grad_mask() const {
  std::vector<double> mask(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) mask[i] = params_[i]->grad().defined() ? 1.0 : 0.0;
  return mask;
}

void GradientSync::all_reduce(const std::vector<double>& any_rank_has_grad) {
  TARN_CHECK(any_rank_has_grad.size() == params_.size(), "GradientSync: a mask of ", any_rank_has_grad.size(),
             " values for ", params_.size(), " parameters");
  last_comm_s_ = 0;
  if (comm_.world() == 1 || params_.empty()) return;
  for (size_t i = 0; i < params_.size(); ++i)
    pack_gradient(*params_[i], flat_.narrow0(offsets_[i], offsets_[i] + params_[i]->numel()));
  const auto start = std::chrono::steady_clock::now();
  int64_t begin = 0;
  for (int64_t end : bucket_ends_) {
    comm_.all_reduce_sum(flat_.narrow0(begin, end).device_f32(), end - begin);
    begin = end;
  }
  last_comm_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
}

}  // namespace tarn
