#pragma once
// Tensor: a shape, a dtype, a device and a reference to shared storage. Dense, contiguous,
// row-major. Views (reshape, slicing along the first axis) share storage; anything that would
// need strides (transpose, permute) is an explicit copying op in framework/ops.
//
// Tensor is a cheap handle (two shared_ptrs): copying it aliases the same data.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/shape.h"
#include "kernels/check.h"

namespace tarn {

class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

struct Node;
struct AutogradMeta;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // Fresh storage (uninitialised for empty).
  static Tensor empty(const Shape& shape, Device device = Device::cpu(), DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor scalar(float value) { return from_vector({value}, Shape{}); }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.size(); }
  int64_t size(int axis) const { return shape_[shape_.axis(axis)]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_));
  }
  float* f32() const;  // checks dtype f32 and device cpu
  // The f32 buffer in the tensor's own device memory (host memory on the CPU): for handing to
  // the kernels of that device (kernels/backend.h), never for reading on the host.
  float* device_f32() const;
  float item() const;  // the value of a one-element CPU tensor
  std::vector<float> to_vector() const;  // copies to host
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool same_storage(const Tensor& o) const { return storage_ == o.storage_; }

  // Views without autograd (framework/ops has the differentiable versions).
  Tensor view(const Shape& shape) const;            // one extent may be -1
  Tensor narrow0(int64_t begin, int64_t end) const;  // rows [begin, end) of the first axis
  Tensor clone() const;                               // deep copy, same device
  Tensor to(Device device) const;                     // copy to another device (or self)
  void copy_from(const Tensor& src);                  // same numel, any device pair
  void fill(float value);
  // Points this handle at `data`'s elements (same shape and dtype), keeping its autograd state:
  // how a parameter comes to live in a ParameterArena (framework/parameter_arena.h). Other
  // handles on the old storage keep it.
  void share_data_of(const Tensor& data);

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on);  // only on leaves
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor grad() const;                 // accumulated gradient of a leaf (undefined if none)
  void set_grad(const Tensor& g);
  void zero_grad();                    // drops the gradient
  Tensor detach() const;               // same storage, no history
  void backward() const;                     // from a one-element tensor
  void backward(const Tensor& grad) const;  // seeded with `grad` (same shape)
  const std::shared_ptr<AutogradMeta>& meta() const { return meta_; }
  std::shared_ptr<AutogradMeta>& mutable_meta();

  std::string str(int max_values = 8) const;  // shape and first values, for messages

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
  std::shared_ptr<AutogradMeta> meta_;
};

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  Tensor grad;                    // accumulated gradient of a leaf
  // Where a leaf's gradient lives when its parameter is in a ParameterArena: a view of the
  // arena's gradient buffer. Autograd copies the first gradient of a step into it and adds the
  // rest in place, so `grad` is then this view (undefined again after zero_grad()).
  Tensor grad_home;
};

// Checks that two tensors have the same shape, naming the op and both shapes otherwise.
void check_same_shape(const char* op, const Tensor& a, const Tensor& b);

}  // namespace tarn
