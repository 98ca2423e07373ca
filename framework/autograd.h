#pragma once
// Define-by-run autograd. An op computes its output, then calls record() with its inputs and a
// backward lambda that captures only what it needs. backward() walks the recorded graph in
// reverse topological order, accumulating into leaves; each node's lambda (and with it every
// tensor it saved) is released as soon as it has run.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace tarn {

using Grads = std::vector<Tensor>;           // one per input; undefined = no gradient
using NeedsGrad = std::vector<bool>;         // which inputs want a gradient
using BackwardFn = std::function<Grads(const Tensor& dy, const NeedsGrad& needs)>;

struct Edge {
  std::shared_ptr<Node> node;           // set when the input came out of an op
  std::shared_ptr<AutogradMeta> leaf;   // set when the input is a leaf that requires grad
  bool active() const { return node || leaf; }
};

struct Node {
  std::string name;
  std::vector<Edge> inputs;
  NeedsGrad needs;
  BackwardFn backward;
  Shape out_shape;
};

// Attaches a backward to `out` when gradients are enabled and any input requires them;
// otherwise returns `out` untouched (and `fn` is dropped at once).
Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn);

// True inside no NoGradGuard scope on this thread.
bool grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Runs backward from `root`. With no `grad`, root must have one element (seeded with 1).
void run_backward(const Tensor& root, const Tensor& grad);

}  // namespace tarn
