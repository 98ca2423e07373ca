// framework/optim/clip_grad.h: the global L2 norm over every gradient, clipping to max_norm,
// and what is left alone (small norms, non-finite norms, parameters without gradients).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/optim/clip_grad.h"

namespace tarn {
namespace {

struct Params {
  Tensor a = Tensor::zeros({2, 2}), b = Tensor::zeros({3}), none = Tensor::zeros({5});
  Params(const std::vector<float>& ga, const std::vector<float>& gb) {
    for (Tensor* t : {&a, &b, &none}) t->set_requires_grad(true);
    a.set_grad(Tensor::from_vector(ga, {2, 2}));
    b.set_grad(Tensor::from_vector(gb, {3}));
  }
  std::vector<Tensor*> list() { return {&a, &b, &none}; }
};

TEST(ClipGradNorm, NormIsTheL2NormOverAllGradientsTogether) {
  Params p({1, 2, 3, 4}, {0, 5, 1});  // 1+4+9+16+25+1 = 56
  EXPECT_NEAR(global_grad_norm(p.list()), std::sqrt(56.0), 1e-12);
  EXPECT_NEAR(clip_grad_norm(p.list(), 100.0f), std::sqrt(56.0f), 1e-6);
}

TEST(ClipGradNorm, LargeNormIsScaledDownToMaxNormAndThePreClipNormReturned) {
  Params p({3, 0, 0, 0}, {0, 4, 0});  // norm 5
  const std::vector<float> a0 = p.a.grad().to_vector();
  const float norm = clip_grad_norm(p.list(), 1.0f);
  EXPECT_FLOAT_EQ(norm, 5.0f);
  EXPECT_NEAR(global_grad_norm(p.list()), 1.0, 1e-6);
  // Direction kept: every element scaled by the same max_norm / (norm + 1e-6).
  const float factor = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(p.a.grad().to_vector()[0], a0[0] * factor);
  EXPECT_EQ(p.b.grad().to_vector()[1], 4.0f * factor);
  EXPECT_FALSE(p.none.grad().defined());
}

TEST(ClipGradNorm, NormBelowMaxLeavesGradientsBitIdentical) {
  Params p({0.1f, -0.2f, 0.3f, 0.05f}, {0.01f, 0.02f, -0.03f});
  const std::vector<float> a0 = p.a.grad().to_vector(), b0 = p.b.grad().to_vector();
  clip_grad_norm(p.list(), 1.0f);
  EXPECT_EQ(p.a.grad().to_vector(), a0);
  EXPECT_EQ(p.b.grad().to_vector(), b0);
}

TEST(ClipGradNorm, NonFiniteNormIsReportedAndNothingIsScaled) {
  Params p({1, 2, INFINITY, 4}, {10, 20, 30});
  const std::vector<float> b0 = p.b.grad().to_vector();
  EXPECT_TRUE(std::isinf(clip_grad_norm(p.list(), 1.0f)));
  EXPECT_EQ(p.b.grad().to_vector(), b0);

  Params q({1, NAN, 3, 4}, {10, 20, 30});
  EXPECT_TRUE(std::isnan(clip_grad_norm(q.list(), 1.0f)));
  EXPECT_EQ(q.b.grad().to_vector(), b0);
}

TEST(ClipGradNorm, GradientsSharingOneBufferAreScaledOnce) {
  // Autograd may hand one buffer to two leaves (an add's dy); scaling it twice would clip to
  // max_norm / 2.
  Tensor x = Tensor::zeros({2}), y = Tensor::zeros({2});
  x.set_requires_grad(true);
  y.set_requires_grad(true);
  const Tensor shared = Tensor::from_vector({3, 4}, {2});
  x.set_grad(shared);
  y.set_grad(shared);
  const float norm = clip_grad_norm(std::vector<Tensor*>{&x, &y}, 1.0f);
  EXPECT_NEAR(norm, std::sqrt(50.0f), 1e-5);  // both count towards the norm
  EXPECT_NEAR(x.grad().to_vector()[0], 3.0 / std::sqrt(50.0), 1e-6);
  EXPECT_NEAR(global_grad_norm(std::vector<Tensor*>{&x, &y}), 1.0, 1e-6);
}

TEST(ClipGradNorm, NamedParameterListsWorkTheSame) {
  Params p({3, 0, 0, 0}, {0, 4, 0});
  std::vector<std::pair<std::string, Tensor*>> named{{"a", &p.a}, {"b", &p.b}, {"none", &p.none}};
  EXPECT_FLOAT_EQ(clip_grad_norm(named, 2.5f), 5.0f);
  EXPECT_NEAR(global_grad_norm(named), 2.5, 1e-6);
  EXPECT_THROW(clip_grad_norm(named, 0.0f), Error);
}

}  // namespace
}  // namespace tarn
