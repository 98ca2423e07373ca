#pragma once
// Module / Parameter registry with hierarchical names, as HuggingFace spells them
// ("model.encoder.layers.0.fc1.weight"). A module registers pointers to its own Tensor members
// and child modules; named_parameters() walks the tree in registration order.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/parameter_arena.h"
#include "framework/precision.h"
#include "framework/tensor.h"

namespace tarn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter below this module, names prefixed with `prefix` ("" for none).
  std::vector<std::pair<std::string, Tensor*>> named_parameters(const std::string& prefix = "") const;
  std::vector<Tensor*> parameters() const;
  int64_t parameter_count() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }
  // The arithmetic of this module's matrix products (framework/precision.h), for it and every
  // module below it. Not part of the weights: a checkpoint resumes in either precision.
  void set_precision(Precision p);
  Precision precision() const { return precision_; }
  void zero_grad();
  // Moves every parameter and buffer to `device` (a copy; gradients are dropped). Tensors that
  // shared storage still share it afterwards; parameters stay leaves that require grad. A
  // flattened module stays flattened: its parameters move into a new arena on `device`.
  void to(Device device);

  // Puts every parameter below this module into one ParameterArena on their device (framework/
  // parameter_arena.h), its size a multiple of `pad_to` (ZeRO-1 shards it by rank). Keeps the
  // arena it made before when that one still holds the parameters and is padded to a multiple
  // of `pad_to`. The values do not change; gradients keep their meaning.
  ParameterArena& flatten_parameters(int64_t pad_to = 1);
  // The arena of the last flatten_parameters(), or null.
  const ParameterArena* arena() const { return arena_.get(); }

 protected:
  // Registers `t` (made a leaf that requires grad) under `name`. A parameter registered with
  // kept_initial_value holds the value its layer gave it through model-wide initialisers
  // (framework/init.h: decay rates, convolutions, norms that a layer sets by construction).
  enum class Init { drawn, kept_initial_value };
  Tensor& register_parameter(const std::string& name, Tensor& t, Init init = Init::drawn);
  // Marks `t`, already registered here, as Init::kept_initial_value.
  void keep_initial_value(const Tensor& t);
  // A tensor saved in checkpoints that is not trained (e.g. a FAVOR+ projection).
  Tensor& register_buffer(const std::string& name, Tensor& t);
  template <typename M>
  M& register_module(const std::string& name, M& m) {
    children_.emplace_back(name, &m);
    return m;
  }

 public:
  // Whether `t`, a parameter of this module or one below it, was registered with
  // Init::kept_initial_value.
  bool keeps_initial_value(const Tensor* t) const;
  // Buffers are listed apart from parameters: checkpoints keep both, optimizers only the first.
  std::vector<std::pair<std::string, Tensor*>> named_buffers(const std::string& prefix = "") const;

 private:
  using Named = std::vector<std::pair<std::string, Tensor*>>;
  // The tensors of `list` (params_ or buffers_) here and, prefixed, in every child, in
  // registration order.
  Named named(Named Module::*list, const std::string& prefix) const;

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<const Tensor*> kept_;  // of params_, those registered with Init::kept_initial_value
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
  Precision precision_ = Precision::f32;
  std::shared_ptr<ParameterArena> arena_;
};

}  // namespace tarn
