#pragma once
// The flat parameter and gradient arena (docs/design.md section 5): every parameter of a model
// is a view into one contiguous buffer of values, and its gradient a view into a second one of
// the same layout, on the parameters' device. Autograd adds gradients into those views in place
// (AutogradMeta::grad_home), so what works on all gradients at once works on ranges of one
// buffer: a gradient bucket of GradientSync is a slice of it (no copy into a bucket buffer), a
// ZeRO-1 shard of ShardedAdamW is a range of it, and the gradient norm and AdamW walk it.
//
//   ParameterArena arena(model.parameters(), device);   // values copied in, handles rebound
//   loss.backward();                     // every gradient lands in arena.grads()
//   arena.grads().narrow0(begin, end)    // a bucket: the gradients of the parameters inside
//
// Layout: the distinct parameters (tied handles on one tensor share a range) in the order
// given, each starting at a multiple of `align` elements; the gap before it and the tail up to a
// multiple of `pad_to` are zeros in both buffers, and stay zero: nothing writes them, so they
// add nothing to a sum, a norm or an all-reduce.
//
// The gradient of a parameter keeps its meaning: undefined until a backward reaches it, and
// after zero_grad(). Where a parameter has none, its range of grads() holds stale values; a
// reader of whole slices (an all-reduce) settles each range first (settle_grad()).
#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

class ParameterArena {
 public:
  // 256 bytes: the alignment of cudaMalloc and of the host allocator, so that every parameter
  // starts where a kernel would find a freshly allocated one.
  static constexpr int64_t kDefaultAlign = 64;

  // One distinct parameter: its elements are [offset, offset + numel) of both buffers.
  struct Range {
    Tensor* param;  // the first handle given for it
    int64_t offset = 0;
    int64_t numel = 0;
    int64_t end() const { return offset + numel; }
  };

  // Copies the parameters' values (any device) into fresh buffers on `device` and points every
  // handle at its view; gradients a parameter already had are copied into their view too.
  // Handles on one tensor must share its autograd state (copies of one handle do). All f32.
  ParameterArena(const std::vector<Tensor*>& params, Device device, int64_t align = kDefaultAlign,
                 int64_t pad_to = 1);
  ParameterArena(const ParameterArena&) = delete;
  ParameterArena& operator=(const ParameterArena&) = delete;

  const Tensor& values() const { return values_; }  // (size()), the parameters
  const Tensor& grads() const { return grads_; }    // (size()), their gradients
  int64_t size() const { return values_.numel(); }  // elements, padding included
  int64_t align() const { return align_; }
  int64_t pad_to() const { return pad_to_; }
  Device device() const { return values_.device(); }
  const std::vector<Range>& ranges() const { return ranges_; }

  // The range holding `param`'s elements (a handle of this arena), or -1.
  int64_t range_of(const Tensor& param) const;
  // True while every parameter given is still a view of values() (Module::to() or another
  // arena re-homes them).
  bool holds_its_parameters() const;

  // Makes range r of grads() hold what the parameter's gradient means to a sum over ranks: the
  // gradient itself (already there when autograd made it), a copy of one set elsewhere
  // (Tensor::set_grad, which then points at the range), or zeros when it has none (its
  // gradient stays undefined).
  void settle_grad(size_t r) const;
  // The view of range r of grads() in the parameter's shape, and makes it the parameter's
  // gradient (after an all-reduce wrote a sum there).
  void adopt_grad(size_t r) const;

 private:
  std::vector<Range> ranges_;
  int64_t align_, pad_to_;
  Tensor values_, grads_;
};

}  // namespace tarn
