#include <gtest/gtest.h>

#include <memory>

#include "framework/autograd.h"
#include "framework/module.h"
#include "framework/ops/matmul.h"
#include "tests/common/gradcheck.h"

namespace tarn {
namespace {

// y = x² elementwise, written here so the engine is tested apart from the op library.
Tensor square(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.f32()[i] = x.f32()[i] * x.f32()[i];
  return record("square", y, {x}, [x](const Tensor& dy, const NeedsGrad&) -> Grads {
    Tensor dx = Tensor::empty(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) dx.f32()[i] = 2 * x.f32()[i] * dy.f32()[i];
    return {dx};
  });
}

// y = a + b, passing dy through to both inputs (the aliasing case the engine must handle).
Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor y = Tensor::empty(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) y.f32()[i] = a.f32()[i] + b.f32()[i];
  return record("plus", y, {a, b}, [](const Tensor& dy, const NeedsGrad&) -> Grads { return {dy, dy}; });
}

Tensor total(const Tensor& x) {
  Tensor y = Tensor::scalar(0);
  for (int64_t i = 0; i < x.numel(); ++i) y.f32()[0] += x.f32()[i];
  const Shape s = x.shape();
  return record("total", y, {x}, [s](const Tensor& dy, const NeedsGrad&) -> Grads {
    return {Tensor::full(s, dy.item())};
  });
}

TEST(Autograd, LeafUsedTwiceAccumulates) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}).set_requires_grad(true);
  total(plus(square(x), x)).backward();  // d/dx (x² + x) = 2x + 1
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 5, 7}));
}

TEST(Autograd, DiamondWithPassThroughGradientsIsNotCorrupted) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor h = plus(x, x);                   // 2x
  Tensor y = plus(plus(h, h), square(h));  // 4x + 4x²
  total(y).backward();                     // 4 + 8x
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{12, 20}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCallsUntilZeroed) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  total(square(x)).backward();
  total(square(x)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{4, 8}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, NoGradScopeRecordsNothing) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  NoGradGuard guard;
  Tensor y = square(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_FALSE(y.grad_fn());
}

TEST(Autograd, SavedTensorsAreReleasedByBackward) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor y = square(x);  // the op's lambda holds a reference to x's storage
  const long uses_with_graph = x.storage().use_count();
  total(y).backward();
  EXPECT_EQ(x.storage().use_count(), uses_with_graph - 1);
  EXPECT_FALSE(y.grad_fn()->backward);
}

TEST(Autograd, SecondBackwardThroughTheSameGraphIsAClearError) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor l = total(square(x));
  l.backward();
  EXPECT_THROW(l.backward(), Error);
}

TEST(Autograd, NonScalarRootNeedsAnExplicitGradient) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor y = square(x);
  EXPECT_THROW(y.backward(), Error);
  y.backward(Tensor::from_vector({1, 10}, {2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 40}));
}

TEST(Autograd, InputsThatDoNotNeedGradientsAreNotComputed) {
  Tensor a = testing::random_tensor({3, 4}, 1).set_requires_grad(true);
  Tensor b = testing::random_tensor({4, 5}, 2);  // constant
  NeedsGrad seen;
  Tensor y = record("probe", matmul(a, b), {a, b}, [&seen](const Tensor& dy, const NeedsGrad& needs) -> Grads {
    seen = needs;
    return {Tensor::zeros({3, 4}), Tensor()};
  });
  y.backward(Tensor::ones({3, 5}));
  EXPECT_EQ(seen, (NeedsGrad{true, false}));
}

class TwoLayer : public Module {
 public:
  struct Inner : Module {
    Tensor weight = Tensor::zeros({2, 2}), bias = Tensor::zeros({2});
    Inner() {
      register_parameter("weight", weight);
      register_parameter("bias", bias);
    }
  };
  Inner fc1, fc2;
  Tensor table = Tensor::zeros({3});
  TwoLayer() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_buffer("table", table);
  }
};

TEST(Module, HierarchicalNamesInRegistrationOrder) {
  TwoLayer m;
  std::vector<std::string> names;
  for (auto& [name, t] : m.named_parameters("model")) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.fc1.weight", "model.fc1.bias", "model.fc2.weight",
                                             "model.fc2.bias"}));
  EXPECT_EQ(m.named_buffers().at(0).first, "table");
  EXPECT_EQ(m.parameter_count(), 12);
  EXPECT_TRUE(m.fc1.weight.requires_grad());
  m.eval();
  EXPECT_FALSE(m.fc2.training());
}

}  // namespace
}  // namespace tarn

namespace tarn {
namespace {

TEST(Autograd, LeavesNeverShareAGradientBuffer) {
  // plus() hands the same dy to both inputs: each leaf must still own its gradient, or an
  // in-place update of one (clipping, accumulation) would change the other.
  Tensor a = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor b = Tensor::from_vector({3, 4}, {2}).set_requires_grad(true);
  plus(a, b).backward(Tensor::from_vector({1, 1}, {2}));
  EXPECT_FALSE(a.grad().same_storage(b.grad()));
  plus(a, b).backward(Tensor::from_vector({1, 1}, {2}));  // accumulates in place
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 2}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2}));
}

}  // namespace
}  // namespace tarn

namespace tarn {
namespace {

// Records what a BackwardObserver sees, with each leaf's gradient at the moment it was called
// ready (so a later addition into it would show).
struct Recorder : BackwardObserver {
  std::vector<const AutogradMeta*> order;
  std::vector<std::vector<float>> grads_when_ready;
  int nodes = 0;
  void leaf_ready(const AutogradMeta& leaf) override {
    order.push_back(&leaf);
    grads_when_ready.push_back(leaf.grad.defined() ? leaf.grad.to_vector() : std::vector<float>{});
  }
  void node_done() override { ++nodes; }
};

TEST(Autograd, ObserverHearsOfEachLeafOnceItsGradientIsFinal) {
  // a feeds the graph early and late (square(a) and the outer plus), b only deep inside: a must
  // be reported after its last contribution, with its final gradient, and each leaf once.
  Tensor a = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Tensor b = Tensor::from_vector({3, 4}, {2}).set_requires_grad(true);
  Tensor unused = Tensor::from_vector({5}, {1}).set_requires_grad(true);
  Recorder r;
  {
    ObserveBackward observe(r);
    total(plus(plus(square(a), square(b)), a)).backward();  // d/da = 2a + 1, d/db = 2b
  }
  ASSERT_EQ(r.order.size(), 2u);
  EXPECT_EQ(r.nodes, 5);  // total, two plus, two square
  for (size_t i = 0; i < r.order.size(); ++i) {
    if (r.order[i] == a.meta().get()) {
      EXPECT_EQ(r.grads_when_ready[i], (std::vector<float>{3, 5}));
    } else {
      EXPECT_EQ(r.order[i], b.meta().get());
      EXPECT_EQ(r.grads_when_ready[i], (std::vector<float>{6, 8}));
    }
  }
  EXPECT_NE(r.order[0], r.order[1]);
  EXPECT_FALSE(unused.grad().defined());

  // Out of scope, nothing is observed.
  total(square(a)).backward();
  EXPECT_EQ(r.order.size(), 2u);
}

TEST(Autograd, ObserverHearsOfALeafRootAndOfLeavesWhoseGradientNeverCame) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).set_requires_grad(true);
  Recorder r;
  ObserveBackward observe(r);
  x.backward(Tensor::from_vector({1, 1}, {2}));
  ASSERT_EQ(r.order.size(), 1u);
  EXPECT_EQ(r.order[0], x.meta().get());
  // A node that returns no gradient for its input still makes that input's leaf final.
  Tensor y = Tensor::from_vector({3}, {1}).set_requires_grad(true);
  Tensor out = record("drop", Tensor::scalar(0), {y}, [](const Tensor&, const NeedsGrad&) -> Grads { return {Tensor()}; });
  out.backward();
  ASSERT_EQ(r.order.size(), 2u);
  EXPECT_EQ(r.order[1], y.meta().get());
  EXPECT_TRUE(r.grads_when_ready[1].empty());
}

}  // namespace
}  // namespace tarn
