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

// Watches the backward passes this thread runs while an ObserveBackward is alive: what
// data-parallel training needs to start reducing a gradient while the rest of the backward
// still runs (framework/distributed/gradient_sync.h).
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  // `leaf`'s gradient is final for this pass: every node that feeds it has run. Called once per
  // leaf the pass reaches, whether or not a gradient arrived; leaves it does not reach, never.
  virtual void leaf_ready(const AutogradMeta& leaf) = 0;
  // After each node's backward function: a moment to move communication on.
  virtual void node_done() {}
};

class ObserveBackward {
 public:
  explicit ObserveBackward(BackwardObserver& observer);
  ~ObserveBackward();
  ObserveBackward(const ObserveBackward&) = delete;
  ObserveBackward& operator=(const ObserveBackward&) = delete;

 private:
  BackwardObserver* previous_;
};

}  // namespace tarn
