#include "framework/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "framework/backend.h"
#include "kernels/memory.h"

namespace tarn {
namespace {

thread_local bool g_grad_enabled = true;
thread_local BackwardObserver* g_observer = nullptr;

// dst += src. Gradients only meet on the device they were computed on.
void accumulate_into(Tensor& dst, const Tensor& src, const char* where) {
  check_same_shape(where, dst, src);
  TARN_ASSERT(dst.device() == src.device(), where, ": gradients on ", dst.device().str(), " and ",
              src.device().str(), " meet (every input of an op must live on one device)");
  if (dst.device().is_cpu())
    kernels::cpu::accumulate(dst.f32(), src.f32(), dst.numel());
  else
    backend_for(dst.device()).accumulate(dst.device_f32(), src.device_f32(), dst.numel());
}

// A gradient waiting to be consumed. `owned` says whether we may add into it in place: a
// gradient handed back by a backward function may alias another (an add passes dy to both
// inputs), so the first accumulation clones it.
struct Pending {
  Tensor grad;
  bool owned = false;
};

void add_pending(Pending& p, const Tensor& g, const char* where) {
  if (!p.grad.defined()) {
    p.grad = g;
    return;
  }
  if (!p.owned) {
    p.grad = p.grad.clone();
    p.owned = true;
  }
  accumulate_into(p.grad, g, where);
}

// Adds `g` to a leaf whose parameter lives in a ParameterArena, in place: the first gradient of
// a step is copied into the arena's view (grad_home), the later ones are added to it there, so
// the gradient never moves. The copy gives the bits that taking `g` itself would. False when
// the leaf has no home, or when set_grad() gave it a gradient elsewhere: the caller then
// accumulates as for any leaf.
bool accumulate_in_home(AutogradMeta& leaf, const Tensor& g, const char* where) {
  if (!leaf.grad_home.defined()) return false;
  if (!leaf.grad.defined()) {
    check_same_shape(where, leaf.grad_home, g);
    leaf.grad_home.copy_from(g);
    leaf.grad = leaf.grad_home;
    return true;
  }
  if (!leaf.grad.same_storage(leaf.grad_home) || leaf.grad.data<char>() != leaf.grad_home.data<char>()) return false;
  accumulate_into(leaf.grad, g, where);
  return true;
}

}  // namespace

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

ObserveBackward::ObserveBackward(BackwardObserver& observer) : previous_(g_observer) { g_observer = &observer; }
ObserveBackward::~ObserveBackward() { g_observer = previous_; }

Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!g_grad_enabled) return out;
  std::vector<Edge> edges(inputs.size());
  NeedsGrad needs(inputs.size(), false);
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) continue;
    if (in.grad_fn()) {
      edges[i].node = in.grad_fn();
    } else if (in.requires_grad()) {
      edges[i].leaf = in.meta();
    }
    needs[i] = edges[i].active();
    any = any || needs[i];
  }
  if (!any) return out;
  auto node = std::make_shared<Node>();
  node->name = op;
  node->inputs = std::move(edges);
  node->needs = std::move(needs);
  node->backward = std::move(fn);
  node->out_shape = out.shape();
  Tensor result = out.detach();  // fresh autograd state: `out` may alias an input
  auto& meta = result.mutable_meta();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
  return result;
}

void run_backward(const Tensor& root, const Tensor& seed) {
  NoGradGuard no_grad;  // backward functions compute plain tensors: no graph of the graph
  TARN_ASSERT(root.defined(), "backward: undefined tensor");
  Tensor grad = seed;
  if (!grad.defined()) {
    TARN_ASSERT(root.numel() == 1, "backward: without an explicit gradient the output must be a scalar, got shape ",
                root.shape().str());
    grad = Tensor::ones(root.shape(), root.device());
  }
  check_same_shape("backward", root, grad);

  if (!root.grad_fn()) {
    TARN_ASSERT(root.requires_grad(), "backward: the tensor does not require gradients (no op recorded it)");
    if (accumulate_in_home(*root.meta(), grad, "backward")) {
      if (g_observer) g_observer->leaf_ready(*root.meta());
      return;
    }
    Pending p{root.grad(), true};
    add_pending(p, grad, "backward");
    root.meta()->grad = p.grad;
    if (g_observer) g_observer->leaf_ready(*root.meta());
    return;
  }

  // Kahn's algorithm over the nodes reachable from the root: a node runs once every node that
  // consumes its output has handed it a gradient. An observer also learns when a leaf's last
  // feeding node has run (feeders counts them).
  BackwardObserver* const observer = g_observer;
  std::unordered_map<Node*, int> consumers;
  std::unordered_map<AutogradMeta*, int> feeders;
  std::vector<Node*> stack{root.grad_fn().get()};
  consumers[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->inputs) {
      if (observer && e.leaf) ++feeders[e.leaf.get()];
      if (!e.node) continue;
      auto [it, fresh] = consumers.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, Pending> pending;
  std::unordered_map<AutogradMeta*, bool> leaf_owned;  // existing leaf grads are ours to add into
  pending[root.grad_fn().get()] = Pending{grad, false};
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor dy = std::move(pending[n].grad);
    pending.erase(n);
    TARN_ASSERT(n->backward, "backward: ", n->name,
                " was already differentiated (its saved tensors are released after one backward pass)");
    Grads grads(n->inputs.size());
    if (dy.defined()) {  // undefined when every consumer returned no gradient for it
      TARN_ASSERT(dy.shape() == n->out_shape, "backward: ", n->name, " got a gradient of shape ",
                  dy.shape().str(), " for an output of shape ", n->out_shape.str());
      grads = n->backward(dy, n->needs);
      dy = Tensor();
    }
    n->backward = nullptr;  // releases everything the op saved
    TARN_ASSERT(grads.size() == n->inputs.size(), "backward: ", n->name, " returned ", grads.size(),
                " gradients for ", n->inputs.size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = n->inputs[i];
      if (!e.active() || !grads[i].defined()) continue;
      if (e.node) {
        add_pending(pending[e.node.get()], grads[i], e.node->name.c_str());
        if (--consumers[e.node.get()] == 0) ready.push_back(e.node.get());
      } else {
        // A leaf's gradient outlives this pass (optimizers scale it in place, the next backward
        // adds into it), so a leaf never keeps a buffer that something else also holds.
        AutogradMeta* leaf = e.leaf.get();
        if (accumulate_in_home(*leaf, grads[i], "backward (leaf)")) continue;
        auto [it, fresh] = leaf_owned.try_emplace(leaf, leaf->grad.defined());
        if (!leaf->grad.defined()) {
          leaf->grad = grads[i].storage().use_count() > 1 ? grads[i].clone() : grads[i];
          it->second = true;
          continue;
        }
        Pending p{leaf->grad, it->second};
        add_pending(p, grads[i], "backward (leaf)");
        leaf->grad = p.grad;
        it->second = p.owned;
      }
    }
    // Inputs whose gradients were all undefined still have to be released to run.
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = n->inputs[i];
      if (e.node && (!grads[i].defined()) && --consumers[e.node.get()] == 0) ready.push_back(e.node.get());
    }
    if (observer) {
      for (const Edge& e : n->inputs)
        if (e.leaf && --feeders[e.leaf.get()] == 0) observer->leaf_ready(*e.leaf);
      observer->node_done();
    }
  }
}

}  // namespace tarn
