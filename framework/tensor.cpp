#include "framework/tensor.h"

#include <cstring>
#include <sstream>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/backend.h"
#include "kernels/memory.h"

namespace tarn {

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device).allocate(bytes);
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, bytes_); }

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

Tensor Tensor::empty(const Shape& shape, Device device, DType dtype) {
  for (int i = 0; i < shape.size(); ++i)
    TARN_ASSERT(shape[i] >= 0, "empty: negative extent in shape ", shape.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device device) { return full(shape, 0.0f, device); }
Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.0f, device); }

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, device);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  TARN_ASSERT(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
              " values do not fill shape ", shape.str());
  Tensor t = empty(shape);
  if (!values.empty()) std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

float* Tensor::f32() const {
  TARN_ASSERT(defined(), "tensor: access to an undefined tensor");
  TARN_ASSERT(dtype_ == DType::f32, "tensor: expected f32 data, got ", dtype_name(dtype_));
  TARN_ASSERT(device().is_cpu(), "tensor: host access to a tensor on ", device().str());
  return data<float>();
}

float* Tensor::device_f32() const {
  TARN_ASSERT(defined(), "tensor: access to an undefined tensor");
  TARN_ASSERT(dtype_ == DType::f32, "tensor: expected f32 data, got ", dtype_name(dtype_));
  return data<float>();
}

float Tensor::item() const {
  TARN_ASSERT(numel() == 1, "item: expected one element, got shape ", shape_.str());
  return to(Device::cpu()).f32()[0];
}

std::vector<float> Tensor::to_vector() const {
  Tensor h = to(Device::cpu());
  const float* p = h.f32();
  return std::vector<float>(p, p + numel());
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TARN_ASSERT(infer < 0, "view: more than one -1 in ", shape.str());
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    TARN_ASSERT(known > 0 && numel() % known == 0, "view: cannot view shape ", shape_.str(), " as ", shape.str());
    s[infer] = numel() / known;
  }
  TARN_ASSERT(s.numel() == numel(), "view: cannot view shape ", shape_.str(), " (", numel(), " elements) as ",
              shape.str());
  Tensor t = *this;
  t.shape_ = s;
  t.meta_.reset();
  return t;
}

Tensor Tensor::narrow0(int64_t begin, int64_t end) const {
  TARN_ASSERT(dim() >= 1, "narrow0: needs at least one dimension, got shape ", shape_.str());
  TARN_ASSERT(0 <= begin && begin <= end && end <= shape_[0], "narrow0: rows [", begin, ", ", end,
              ") out of range for shape ", shape_.str());
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.offset_ = offset_ + begin * (shape_[0] ? numel() / shape_[0] : 0);
  t.meta_.reset();
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, device(), dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor t = empty(shape_, d, dtype_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  TARN_ASSERT(src.numel() == numel(), "copy_from: source shape ", src.shape().str(), " does not match ",
              shape_.str());
  TARN_ASSERT(src.dtype() == dtype_, "copy_from: dtype ", dtype_name(src.dtype()), " into ", dtype_name(dtype_));
  const size_t bytes = nbytes();
  if (bytes == 0) return;
  const Device from = src.device(), to = device();
  if (from.is_cpu() && to.is_cpu()) {
    if (dtype_ == DType::f32)
      kernels::cpu::copy(data<float>(), src.data<float>(), numel());
    else
      std::memcpy(data<char>(), src.data<char>(), bytes);
  } else if (from.is_cpu()) {
    backend_for(to).copy_host_to_device(data<char>(), src.data<char>(), bytes, to.index);
  } else if (to.is_cpu()) {
    backend_for(from).copy_device_to_host(data<char>(), src.data<char>(), bytes, from.index);
  } else {
    TARN_ASSERT(from.index == to.index, "copy_from: peer copies (", from.str(), " to ", to.str(),
                ") go through the host");
    backend_for(to).copy_device_to_device(data<char>(), src.data<char>(), bytes, to.index);
  }
}

void Tensor::fill(float value) {
  TARN_ASSERT(dtype_ == DType::f32, "fill: only f32 tensors, got ", dtype_name(dtype_));
  if (device().is_cpu())
    kernels::cpu::fill(data<float>(), numel(), value);
  else
    backend_for(device()).fill(data<float>(), numel(), value);
}

void Tensor::share_data_of(const Tensor& data) {
  check_same_shape("share_data_of", *this, data);
  TARN_ASSERT(data.dtype() == dtype_, "share_data_of: dtype ", dtype_name(data.dtype()), " for ", dtype_name(dtype_));
  storage_ = data.storage_;
  offset_ = data.offset_;
}

Tensor& Tensor::set_requires_grad(bool on) {
  TARN_ASSERT(!grad_fn(), "set_requires_grad: only leaves can be marked (this tensor came out of an op)");
  if (on || meta_) mutable_meta()->requires_grad = on;
  return *this;
}

std::shared_ptr<AutogradMeta>& Tensor::mutable_meta() {
  if (!meta_) meta_ = std::make_shared<AutogradMeta>();
  return meta_;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return meta_ ? meta_->grad_fn : none;
}

Tensor Tensor::grad() const { return meta_ ? meta_->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) check_same_shape("set_grad", *this, g);
  mutable_meta()->grad = g;
}

void Tensor::zero_grad() {
  if (meta_) meta_->grad = Tensor();
}

Tensor Tensor::detach() const {
  Tensor t = *this;
  t.meta_.reset();
  return t;
}

void Tensor::backward() const { run_backward(*this, Tensor()); }
void Tensor::backward(const Tensor& grad) const { run_backward(*this, grad); }

bool Tensor::requires_grad() const { return meta_ && meta_->requires_grad; }

std::string Tensor::str(int max_values) const {
  std::ostringstream os;
  os << "Tensor" << shape_.str() << " " << dtype_name(dtype_) << " " << device().str();
  if (defined() && device().is_cpu() && dtype_ == DType::f32) {
    os << " [";
    const int64_t n = std::min<int64_t>(numel(), max_values);
    for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << data<float>()[i];
    if (numel() > n) os << ", ...";
    os << "]";
  }
  return os.str();
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  TARN_ASSERT(a.shape() == b.shape(), op, ": shapes ", a.shape().str(), " and ", b.shape().str(), " differ");
}

}  // namespace tarn
